/**
 * The architecture, tested on the real module graph: `deno info --json main.ts` lists every module
 * main.ts reaches (dynamic imports included) and what each imports, types included. The suite fails
 * on an import cycle, on a module importing from a higher layer, on a module of `lib/` that no layer
 * names, and on a module of `lib/` that main.ts does not reach (dead); in `lib/limit/`, on a backend
 * importing another, a concept's internals imported from outside its folder, or any import the
 * concepts' table does not allow. And on a function of main.ts or `lib/` longer than a screen,
 * measured on the TypeScript compiler's syntax tree.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "npm:typescript@5.9.3";
import { denoInfo, ROOT } from "./_deno_info.ts";

/**
 * The layers, lowest first. A module may import modules of a lower layer and of its own group; two
 * groups of one layer are independent of each other.
 */
const LAYERS: ReadonlyArray<{ layer: number; group: string; matches: (path: string) => boolean }> =
  [
    // Text helpers with no policy, each written once: an error's message and code, SHA-256 in hex,
    // base64, the characters no one-line value may hold. Below the HTTP helpers, which use base64.
    { layer: 0, group: "text", matches: (p) => p.startsWith("lib/text/") },
    // HTTP helpers with no policy: status names, negotiation, representations and their codings.
    { layer: 1, group: "http", matches: (p) => p.startsWith("lib/http/") },
    // A timer that loads nothing, for what is scheduled before the first response.
    { layer: 1, group: "timer", matches: (p) => p === "lib/timer.ts" },
    // A value built on first use and kept.
    { layer: 1, group: "once", matches: (p) => p === "lib/once.ts" },
    // The limiter: the decision, the stores, the guard, the caller key.
    { layer: 2, group: "limit", matches: (p) => p.startsWith("lib/limit/") },
    // The configuration, which names the limiter's settings.
    { layer: 3, group: "config", matches: (p) => p.startsWith("lib/config/") },
    // The pages (content, layout, API reference).
    { layer: 4, group: "pages", matches: (p) => p.startsWith("lib/pages/") },
    // The service's parts: the errors, the access log, the warm-up, the store's events.
    {
      layer: 5,
      group: "service",
      matches: (p) => /^lib\/(errors|access_log|warm_up|store_events)\.ts$/.test(p),
    },
    // OpenTelemetry through Deno's exporter: instruments at the limiter's wrappers and the handler's.
    { layer: 5, group: "telemetry", matches: (p) => p.startsWith("lib/telemetry/") },
    // What the service answers: each path's answers, built when first needed, the per-request
    // choice among them, the cache of prebuilt responses.
    { layer: 6, group: "respond", matches: (p) => p.startsWith("lib/respond/") },
    // The composition, then the wiring.
    { layer: 7, group: "handler", matches: (p) => p === "lib/handler.ts" },
    // What every entry does alike, runtime-neutral (Fastify's warnings and hooks, each in one
    // place): the writer of its lines, its events (the runtime's output given by the entry), its
    // start-up warnings and failure sentences, the listener's events, the handler as an entry
    // builds it, the stop. Above the handler, under the entries: the request path never reaches it.
    { layer: 8, group: "lifecycle", matches: (p) => p.startsWith("lib/lifecycle/") },
    // The process, main.ts's steps: configure, open the store, serve and stop, events, start-up
    // failures as sentences, Deno Deploy's environment.
    { layer: 9, group: "server", matches: (p) => p.startsWith("lib/server/") },
    // Cloudflare Workers' entry folder: the Worker, its bindings and store, the Durable Object
    // class it exports, its build and local server.
    { layer: 9, group: "workers", matches: (p) => p.startsWith("lib/workers/") },
    // Node's entry folder: its main, the adapter to node:http, the files read from the disk, its
    // events and start-up sentences.
    { layer: 9, group: "node", matches: (p) => p.startsWith("lib/node/") },
    { layer: 10, group: "main", matches: (p) => p === "main.ts" },
    // The tools that run before or beside the service, never in it, each a task's entry: the entry
    // picker of `deno task start`, the pages' and the token ranks' builds, the Worker's build and
    // local server.
    { layer: 10, group: "build", matches: (p) => p.startsWith("lib/build/") },
  ];

/** The longest a function may be, in lines from its signature to its closing brace: about a screen. */
const MAX_FUNCTION_LINES = 65;

/** A module graph: each module's path (relative to the root) and the local modules it imports. */
type Graph = Map<string, string[]>;

/**
 * The entry points of the service, one per runtime: Deno's, the Workers runtime's (the Worker, and
 * the Durable Object class its built entry exports beside it: `lib/build/worker.ts`), and Node's.
 */
const ENTRIES = [
  "main.ts",
  "lib/workers/worker.ts",
  "lib/workers/rate_limiter_object.ts",
  "lib/node/main.ts",
];

/** The local part of `deno info --json` of every entry in {@linkcode ENTRIES}. */
async function moduleGraph(): Promise<Graph> {
  const infos = await Promise.all(ENTRIES.map((entry) => denoInfo(entry)));
  const local = (specifier: string) =>
    specifier.startsWith("file:") ? relative(ROOT, fileURLToPath(specifier)) : undefined;
  const graph: Graph = new Map();
  for (const module of infos.flatMap((info) => info.modules)) {
    const path = local(module.specifier);
    if (path === undefined) continue;
    const imports = new Set<string>();
    for (const dependency of module.dependencies ?? []) {
      for (const target of [dependency.code?.specifier, dependency.type?.specifier]) {
        const targetPath = target === undefined ? undefined : local(target);
        if (targetPath !== undefined) imports.add(targetPath);
      }
    }
    graph.set(path, [...imports].sort());
  }
  return graph;
}

/** Every import cycle of `graph`, each as the modules along it (depth-first, each reported once). */
function cycles(graph: Graph): string[][] {
  const found: string[][] = [];
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (module: string) => {
    state.set(module, "open");
    stack.push(module);
    for (const target of graph.get(module) ?? []) {
      if (state.get(target) === "open") found.push([...stack.slice(stack.indexOf(target)), target]);
      else if (!state.has(target)) visit(target);
    }
    stack.pop();
    state.set(module, "done");
  };
  for (const module of [...graph.keys()].sort()) if (!state.has(module)) visit(module);
  return found;
}

/** The imports of `graph` that go to a higher layer or across groups of one layer. */
function layerViolations(graph: Graph): string[] {
  const violations: string[] = [];
  for (const [module, imports] of graph) {
    const from = layerOf(module);
    for (const target of imports) {
      const to = layerOf(target);
      if (!from || !to || to.group === from.group || to.layer < from.layer) continue;
      violations.push(
        `${module} (${from.group}, layer ${from.layer}) imports ${target} (${to.group}, layer ${to.layer})`,
      );
    }
  }
  return violations;
}

function layerOf(path: string): { layer: number; group: string } | undefined {
  return LAYERS.find((layer) => layer.matches(path));
}

/**
 * The limiter's concepts, one folder each under `lib/limit/`, and the concepts each may import
 * (lib/limit/README.md, "Layout"). `open_store.ts`, the composition root at the top, is the one
 * module that crosses them all; no concept imports it.
 */
const LIMIT_CONCEPTS: Readonly<Record<string, readonly string[]>> = {
  // The decision, the store interface, the RateLimit fields, the hit log's contract.
  core: [],
  // The caller key and the words it is held under (addresses are lib/http/'s).
  caller: [],
  // The clocks: steady, the store's as estimated, the peers' majority.
  clock: ["core"],
  // The memory store and its internals: caller table, log pool, run-length log.
  memory: ["core", "caller"],
  // The failure policy around a shared store, and its circuit breaker.
  guard: ["core"],
  // Decided locally by a memory store, shared through a hit log in batches.
  local_first: ["core", "caller", "clock", "memory"],
  kv: ["core"],
  redis: ["core"],
  sqlite: ["core"],
  // The Workers' client of the rate-limiter object, wrapped in the failure policy.
  durable_object: ["core", "guard"],
};

/** The backends: where callers' logs are kept. None imports another. */
const BACKENDS = ["memory", "kv", "redis", "sqlite", "durable_object"];

/** A concept's internals: modules that only its own folder imports. */
const INTERNALS: Readonly<Record<string, readonly string[]>> = {
  memory: [
    "lib/limit/memory/caller_table.ts",
    "lib/limit/memory/log_pool.ts",
    "lib/limit/memory/run_length_log.ts",
  ],
};

/** The limiter concept of `path` (its folder under `lib/limit/`), "" at the top, or undefined. */
function conceptOf(path: string): string | undefined {
  const match = /^lib\/limit\/(?:([a-z_]+)\/)?[a-z_]+\.ts$/.exec(path);
  return match ? match[1] ?? "" : undefined;
}

/** The imports of `graph` that break the limiter's layout: see {@linkcode LIMIT_CONCEPTS}. */
function limitViolations(graph: Graph): string[] {
  const violations: string[] = [];
  for (const [module, imports] of graph) {
    const from = conceptOf(module);
    for (const target of imports) {
      const to = conceptOf(target);
      const internalOf = Object.keys(INTERNALS).find((c) => INTERNALS[c]!.includes(target));
      if (internalOf !== undefined && from !== internalOf) {
        violations.push(`${module} imports ${target}, an internal of ${internalOf}/`);
      }
      if (from === undefined || to === undefined || from === to || from === "") continue;
      if (to === "") violations.push(`${module} imports the composition root ${target}`);
      else if (BACKENDS.includes(from) && BACKENDS.includes(to)) {
        violations.push(`${module} (backend ${from}) imports ${target} (backend ${to})`);
      } else if (!LIMIT_CONCEPTS[from]?.includes(to)) {
        violations.push(`${module} (${from}) imports ${target} (${to}), not among ${from}'s`);
      }
    }
  }
  return violations;
}

/** The entry folders: one per runtime. */
const ENTRY_GROUPS = ["server", "workers", "node"];

/**
 * Entry modules a build step may import, each with why. The Worker's own build steps (`deno task
 * worker`, `worker:build`) refuse a configuration before they build or serve, by the Worker's rules
 * (`lib/workers/bindings.ts`, which uses no runtime API), and name its binding: they are that
 * entry's tools, reading its rules, not another entry's code for their own ends.
 */
const BUILD_MAY_IMPORT: Readonly<Record<string, readonly string[]>> = {
  "lib/build/worker_dev.ts": ["lib/workers/bindings.ts"],
  "lib/build/wrangler_config.ts": ["lib/workers/bindings.ts"],
};

/**
 * The imports of `graph` from a build step (`lib/build/`) into an entry folder, but those of
 * {@linkcode BUILD_MAY_IMPORT}: a build tool reads what every entry reads, never one entry's code
 * (it once took Node's file reader).
 */
function buildImportsOfEntries(graph: Graph): string[] {
  const found: string[] = [];
  for (const [module, imports] of graph) {
    if (layerOf(module)?.group !== "build") continue;
    for (const target of imports) {
      const group = layerOf(target)?.group;
      if (group === undefined || !ENTRY_GROUPS.includes(group)) continue;
      if (!BUILD_MAY_IMPORT[module]?.includes(target)) found.push(`${module} imports ${target}`);
    }
  }
  return found;
}

Deno.test("buildImportsOfEntries() names a build step importing an entry's module", () => {
  const graph: Graph = new Map([
    ["lib/build/tokens.ts", ["lib/node/files.ts", "lib/pages/content.ts"]],
    ["lib/build/worker_dev.ts", ["lib/workers/bindings.ts", "lib/workers/worker.ts"]],
    ["lib/server/serve.ts", ["lib/lifecycle/stop.ts"]],
  ]);
  assert.deepEqual(buildImportsOfEntries(graph), [
    "lib/build/tokens.ts imports lib/node/files.ts",
    "lib/build/worker_dev.ts imports lib/workers/worker.ts",
  ]);
});

/**
 * The local modules `source` (the file `file`) imports for its code, statically or by `import()`,
 * relative to the root, read on the syntax tree. Enough for a build step: an entry is a layer below it, and no
 * lower layer imports an entry, so a build step reaches an entry only by importing it itself.
 */
function localImports(source: string, file: string): string[] {
  const tree = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    // A type-only import is erased: it runs nothing of the module it names.
    const typeOnly = (ts.isImportDeclaration(node) && node.importClause?.isTypeOnly) ||
      (ts.isExportDeclaration(node) && node.isTypeOnly);
    const specifier = typeOnly
      ? undefined
      : (ts.isImportDeclaration(node) || ts.isExportDeclaration(node))
      ? node.moduleSpecifier
      : ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword
      ? node.arguments[0]
      : undefined;
    if (specifier && ts.isStringLiteral(specifier) && specifier.text.startsWith(".")) {
      found.push(relative(ROOT, join(ROOT, file, "..", specifier.text)));
    }
    ts.forEachChild(node, visit);
  };
  visit(tree);
  return found;
}

Deno.test("no build step imports an entry's module", async () => {
  const steps = (await libFiles()).filter((file) => file.startsWith("lib/build/"));
  assert.ok(steps.length >= 5, `the build steps (${steps.length})`);
  const graph: Graph = new Map();
  for (const step of steps) {
    graph.set(step, localImports(await Deno.readTextFile(join(ROOT, step)), step));
  }
  assert.ok(graph.get("lib/build/tokens.ts")!.includes("lib/pages/content.ts"), "imports are read");
  assert.deepEqual(buildImportsOfEntries(graph), []);
});

/**
 * The configuration's modules (`lib/config/`, one concern each) and those of the folder each may
 * import. `config.ts`, the composition root, is the one that crosses the concerns; no module of the
 * folder imports it. Outside the folder, modules import the root, `env.ts` (the variables),
 * `messages.ts`, `rules.ts` and `removal.ts`' notice; the settings' modules are the folder's own.
 */
const CONFIG_MODULES: Readonly<Record<string, readonly string[]>> = {
  "env.ts": [],
  "messages.ts": [],
  "rules.ts": ["messages.ts"],
  "listen.ts": ["env.ts", "rules.ts"],
  "product.ts": ["env.ts", "messages.ts", "rules.ts"],
  "redis_settings.ts": ["env.ts", "messages.ts"],
  "limit_settings.ts": ["env.ts", "redis_settings.ts"],
  "callers.ts": ["env.ts"],
  "removal.ts": ["env.ts"],
  "config.ts": [
    "env.ts",
    "listen.ts",
    "product.ts",
    "limit_settings.ts",
    "callers.ts",
    "removal.ts",
    "rules.ts",
  ],
};

/** The configuration's settings modules: imported only inside `lib/config/`. */
const CONFIG_INTERNALS = [
  "listen.ts",
  "product.ts",
  "redis_settings.ts",
  "limit_settings.ts",
  "callers.ts",
];

/** The imports of `graph` that break the configuration's layout: see {@linkcode CONFIG_MODULES}. */
function configViolations(graph: Graph): string[] {
  const violations: string[] = [];
  const inConfig = (path: string) =>
    path.startsWith("lib/config/") ? path.slice("lib/config/".length) : undefined;
  for (const [module, imports] of graph) {
    const from = inConfig(module);
    for (const target of imports) {
      const to = inConfig(target);
      if (to === undefined) continue;
      if (from === undefined) {
        if (CONFIG_INTERNALS.includes(to)) {
          violations.push(`${module} imports ${target}, an internal of lib/config/`);
        }
      } else if (from !== to && !CONFIG_MODULES[from]?.includes(to)) {
        violations.push(`${module} imports ${target}, not among ${from}'s`);
      }
    }
  }
  return violations;
}

Deno.test("configViolations() names an internal imported from outside and an import the table does not allow", () => {
  const graph: Graph = new Map([
    ["lib/server/configure.ts", ["lib/config/config.ts", "lib/config/product.ts"]],
    ["lib/config/rules.ts", ["lib/config/config.ts", "lib/config/messages.ts"]],
  ]);
  assert.deepEqual(configViolations(graph), [
    "lib/server/configure.ts imports lib/config/product.ts, an internal of lib/config/",
    "lib/config/rules.ts imports lib/config/config.ts, not among rules.ts's",
  ]);
});

Deno.test("the configuration keeps its layout: one module per concern, only config.ts composes them", async () => {
  const graph = await moduleGraph();
  const modules = [...graph.keys()].filter((path) => path.startsWith("lib/config/"))
    .map((path) => path.slice("lib/config/".length));
  assert.deepEqual(modules.sort(), Object.keys(CONFIG_MODULES).sort());
  assert.deepEqual(configViolations(graph), []);
});

/** Every `.ts` file under `lib/`, relative to the root. */
async function libFiles(dir = join(ROOT, "lib")): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const path = join(dir, entry.name);
    if (entry.isDirectory) files.push(...await libFiles(path));
    else if (entry.name.endsWith(".ts")) files.push(relative(ROOT, path));
  }
  return files.sort();
}

Deno.test("cycles() finds a cycle through several modules, and none in a layered graph", () => {
  const cyclic: Graph = new Map([
    ["a.ts", ["b.ts"]],
    ["b.ts", ["c.ts"]],
    ["c.ts", ["a.ts"]],
    ["d.ts", ["a.ts"]],
  ]);
  assert.deepEqual(cycles(cyclic), [["a.ts", "b.ts", "c.ts", "a.ts"]]);
  const layered: Graph = new Map([["a.ts", ["b.ts", "c.ts"]], ["b.ts", ["c.ts"]], ["c.ts", []]]);
  assert.deepEqual(cycles(layered), []);
});

Deno.test("layerViolations() names an import of a higher layer and one across groups of a layer", () => {
  const graph: Graph = new Map([
    ["lib/http/message.ts", ["lib/limit/core/decision.ts"]],
    ["lib/warm_up.ts", ["lib/telemetry/load.ts", "lib/http/message.ts"]],
    ["lib/limit/core/decision.ts", []],
  ]);
  assert.deepEqual(layerViolations(graph), [
    "lib/http/message.ts (http, layer 1) imports lib/limit/core/decision.ts (limit, layer 2)",
    "lib/warm_up.ts (service, layer 5) imports lib/telemetry/load.ts (telemetry, layer 5)",
  ]);
});

Deno.test("limitViolations() names a backend importing another, a sibling's internals and the root", () => {
  const graph: Graph = new Map([
    ["lib/limit/open_store.ts", ["lib/limit/kv/kv_store.ts", "lib/limit/memory/memory_store.ts"]],
    ["lib/limit/kv/kv_store.ts", [
      "lib/limit/memory/memory_store.ts",
      "lib/limit/core/decision.ts",
    ]],
    ["lib/limit/local_first/hit_codec.ts", ["lib/limit/memory/caller_table.ts"]],
    ["lib/limit/redis/redis_store.ts", ["lib/limit/open_store.ts"]],
    ["lib/limit/guard/guarded_store.ts", ["lib/limit/clock/store_clock.ts"]],
    ["lib/limit/memory/memory_store.ts", ["lib/limit/memory/caller_table.ts"]],
  ]);
  assert.deepEqual(limitViolations(graph), [
    "lib/limit/kv/kv_store.ts (backend kv) imports lib/limit/memory/memory_store.ts (backend memory)",
    "lib/limit/local_first/hit_codec.ts imports lib/limit/memory/caller_table.ts, an internal of memory/",
    "lib/limit/redis/redis_store.ts imports the composition root lib/limit/open_store.ts",
    "lib/limit/guard/guarded_store.ts (guard) imports lib/limit/clock/store_clock.ts (clock), not among guard's",
  ]);
});

Deno.test("the limiter keeps its layout: no backend imports another, internals stay in their folder, only the root crosses", async () => {
  const graph = await moduleGraph();
  const concepts = new Set([...graph.keys()].map(conceptOf).filter((c) => c !== undefined));
  assert.deepEqual([...concepts].sort(), ["", ...Object.keys(LIMIT_CONCEPTS)].sort());
  assert.deepEqual(limitViolations(graph), []);
});

Deno.test("lib/limit/ holds only the composition root and README.md at its top; each concept is a folder", async () => {
  const top: string[] = [];
  for await (const entry of Deno.readDir(join(ROOT, "lib/limit"))) {
    top.push(entry.isDirectory ? `${entry.name}/` : entry.name);
  }
  assert.deepEqual(
    top.sort(),
    ["README.md", "open_store.ts", ...Object.keys(LIMIT_CONCEPTS).map((c) => `${c}/`)].sort(),
  );
});

Deno.test("the module graph of main.ts has no import cycle", async () => {
  const graph = await moduleGraph();
  assert.ok(graph.size > 20, `deno info lists the local modules (${graph.size})`);
  assert.deepEqual(cycles(graph).map((cycle) => cycle.join(" -> ")), []);
});

Deno.test("no module imports from a higher layer, nor from another group of its layer", async () => {
  assert.deepEqual(layerViolations(await moduleGraph()), []);
});

Deno.test("every module of lib/ belongs to a layer and is reached from an entry or is a build step", async () => {
  const graph = await moduleGraph();
  const files = await libFiles();
  assert.ok(files.length > 20, `lib/ has its modules (${files.length})`);
  assert.deepEqual(files.filter((file) => !layerOf(file)), [], "modules no layer names");
  // A build step (`deno task render`, the entry picker of `deno task start`) is an entry point of
  // its own: it runs before the service, not in it, and must be a task's entry to be exempt.
  const tasks = Object.values(JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json"))).tasks);
  const buildSteps = files.filter((file) =>
    tasks.some((task) =>
      typeof task === "string" && (task.endsWith(` ${file}`) || task.includes(` ${file})`))
    )
  );
  assert.deepEqual(
    buildSteps,
    [
      "lib/build/entry.ts",
      "lib/build/render_pages.ts",
      "lib/build/tokens.ts",
      "lib/build/worker.ts",
      "lib/build/worker_dev.ts",
    ],
    "build steps run by a task",
  );
  // A build step's own helper (wrangler.json read and checked for both Worker tasks) is reached
  // from the steps that import it; it runs before the service too, never in it.
  const stepModules = new Set(
    (await Promise.all(buildSteps.map((step) => denoInfo(step, true))))
      .flatMap((info) => info.modules)
      .map((module) => module.specifier)
      .filter((specifier) => specifier.startsWith("file:"))
      .map((specifier) => relative(ROOT, fileURLToPath(specifier))),
  );
  assert.deepEqual(
    files.filter((file) => !graph.has(file) && !stepModules.has(file)),
    [],
    "modules no entry reaches",
  );
});

/** Every function with a body in `source` longer than `maxLines`, as "file:line name (N lines)". */
function longFunctions(source: string, file: string, maxLines: number): string[] {
  const tree = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && "body" in node && node.body !== undefined) {
      const first = tree.getLineAndCharacterOfPosition(node.getStart(tree)).line;
      const lines = tree.getLineAndCharacterOfPosition(node.getEnd()).line - first + 1;
      if (lines > maxLines) {
        found.push(`${file}:${first + 1} ${nameOf(node, tree)} (${lines} lines)`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(tree);
  return found;
}

function nameOf(node: ts.Node, tree: ts.SourceFile): string {
  const named = node as ts.Node & { name?: ts.Node };
  if (named.name) return named.name.getText(tree);
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)) {
    return parent.name.getText(tree);
  }
  return "(anonymous)";
}

Deno.test("longFunctions() measures a function from its signature to its closing brace", () => {
  const body = Array.from({ length: 8 }, (_, i) => `  const v${i} = ${i};`).join("\n");
  const source = `/** Doc. */\nexport function long() {\n${body}\n}\nconst short = () => 1;\n`;
  assert.deepEqual(longFunctions(source, "x.ts", 9), ["x.ts:2 long (10 lines)"]);
  assert.deepEqual(longFunctions(source, "x.ts", 10), []);
});

Deno.test(`no function in main.ts or lib/ is longer than ${MAX_FUNCTION_LINES} lines`, async () => {
  const files = ["main.ts", ...await libFiles()];
  const long: string[] = [];
  for (const file of files) {
    long.push(
      ...longFunctions(await Deno.readTextFile(join(ROOT, file)), file, MAX_FUNCTION_LINES),
    );
  }
  assert.deepEqual(long, []);
});

/**
 * The most modules of `lib/` one request may run, the limiter's included (lib/README.md,
 * "Architecture"): one concept each. Issue 32 aimed at 10; the eleventh is negotiation, a concept of
 * its own (STYLE.md).
 */
const MAX_REQUEST_PATH_MODULES = 11;

/**
 * The local modules that run at least once per request for `/api/v1/platform` (JSON, 200, the
 * memory store at the default limit, callers with several requests in the window): the V8 coverage
 * of `tests/_request_path_probe.ts` after 1 and after 101 requests, compared per module (the calls
 * of its functions).
 */
async function requestPathModules(): Promise<string[]> {
  const callsAfter = async (requests: number) => {
    const dir = await Deno.makeTempDir();
    try {
      const run = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", `--coverage=${dir}`, "tests/_request_path_probe.ts", String(requests)],
        cwd: ROOT,
        stdout: "null",
        stderr: "inherit",
      }).output();
      assert.ok(run.success, "the probe ran");
      const calls = new Map<string, number>();
      for await (const entry of Deno.readDir(dir)) {
        const script = JSON.parse(await Deno.readTextFile(join(dir, entry.name))) as {
          url: string;
          functions: Array<{ ranges: Array<{ count: number }> }>;
        };
        if (!script.url.startsWith("file:")) continue;
        const path = relative(ROOT, fileURLToPath(script.url));
        const count = script.functions.reduce((sum, f) => sum + (f.ranges[0]?.count ?? 0), 0);
        calls.set(path, (calls.get(path) ?? 0) + count);
      }
      return calls;
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  };
  const [once, more] = [await callsAfter(1), await callsAfter(101)];
  return [...more].filter(([path, calls]) =>
    !path.startsWith("tests/") && calls - (once.get(path) ?? 0) >= 100
  ).map(([path]) => path).sort();
}

Deno.test(`a request runs at most ${MAX_REQUEST_PATH_MODULES} modules of lib/`, async () => {
  const modules = await requestPathModules();
  // The probe's requests reached the handler, the store and the response: the count is of a real path.
  for (
    const module of [
      "lib/handler.ts",
      "lib/limit/memory/memory_store.ts",
      "lib/respond/response_cache.ts",
    ]
  ) {
    assert.ok(modules.includes(module), `${module} is missing from ${modules.join(", ")}`);
  }
  assert.ok(
    modules.length <= MAX_REQUEST_PATH_MODULES,
    `${modules.length} modules: ${modules.join(", ")}`,
  );
});

/** The folders where a runtime's API may be used: one entry folder per runtime. */
const PLATFORM_FOLDERS = ["lib/server/", "lib/workers/", "lib/node/"];

/** Modules outside the entry folders that use Deno's API, each with why: none today. */
const DENO_ADAPTERS_OUTSIDE: readonly string[] = [];

/**
 * The runtime APIs `source` uses: `Deno.` (a value or a type) and `cloudflare:` imports, as
 * "file:line what", found on the syntax tree (comments and strings do not count).
 */
function runtimeApiUses(source: string, file: string): string[] {
  const tree = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const at = (node: ts.Node, what: string) =>
    found.push(
      `${file}:${tree.getLineAndCharacterOfPosition(node.getStart(tree)).line + 1} ${what}`,
    );
  const visit = (node: ts.Node) => {
    if (
      (ts.isPropertyAccessExpression(node) && ts.isIdentifier(node.expression) &&
        node.expression.text === "Deno") ||
      (ts.isQualifiedName(node) && ts.isIdentifier(node.left) && node.left.text === "Deno")
    ) {
      at(node, node.getText(tree));
    } else if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier !== undefined && ts.isStringLiteral(node.moduleSpecifier) &&
      node.moduleSpecifier.text.startsWith("cloudflare:")
    ) {
      at(node, `import "${node.moduleSpecifier.text}"`);
    } else if (
      ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined && ts.isStringLiteral(node.arguments[0]) &&
      node.arguments[0].text.startsWith("cloudflare:")
    ) {
      at(node, `import("${node.arguments[0].text}")`);
    }
    ts.forEachChild(node, visit);
  };
  visit(tree);
  return found;
}

Deno.test("runtimeApiUses() finds Deno's values and types and cloudflare: imports, not comments", () => {
  const source = [
    "// Deno.exit in a comment",
    'import { DurableObject } from "cloudflare:workers";',
    "const text = Deno.readTextFileSync('x');",
    "let addr: Deno.Addr;",
    'const s = "Deno.env";',
    'await import("cloudflare:sockets");',
  ].join("\n");
  assert.deepEqual(runtimeApiUses(source, "x.ts"), [
    'x.ts:2 import "cloudflare:workers"',
    "x.ts:3 Deno.readTextFileSync",
    "x.ts:4 Deno.Addr",
    'x.ts:6 import("cloudflare:sockets")',
  ]);
});

/** The Worker's entries: the Worker and its Durable Object class. */
const WORKER_ENTRIES = ["lib/workers/worker.ts", "lib/workers/rate_limiter_object.ts"];

/** The modules of `lib/` that `entries` run, by their code imports (types erase). */
async function runtimeModules(entries: readonly string[]): Promise<string[]> {
  const infos = await Promise.all(entries.map((entry) => denoInfo(entry)));
  const local = (specifier: string) =>
    specifier.startsWith("file:") ? relative(ROOT, fileURLToPath(specifier)) : undefined;
  const imports = new Map<string, string[]>();
  for (const module of infos.flatMap((info) => info.modules)) {
    const path = local(module.specifier);
    if (path === undefined) continue;
    const code = (module.dependencies ?? []).map((d) => d.code && local(d.code.specifier));
    imports.set(path, code.filter((target): target is string => target !== undefined));
  }
  const reached = new Set<string>();
  const visit = (path: string) => {
    if (reached.has(path)) return;
    reached.add(path);
    for (const target of imports.get(path) ?? []) visit(target);
  };
  entries.forEach(visit);
  return [...reached].filter((path) => path.startsWith("lib/")).sort();
}

Deno.test("the request path is runtime-neutral: only lib/server/ and lib/workers/ use Deno's API or import cloudflare:", async () => {
  const shared = (await runtimeModules(WORKER_ENTRIES)).filter((path) =>
    !PLATFORM_FOLDERS.some((folder) => path.startsWith(folder)) &&
    !DENO_ADAPTERS_OUTSIDE.includes(path)
  );
  // The parts the issue names are among what the Worker runs (so this test covers them).
  for (
    const module of [
      "lib/handler.ts",
      "lib/http/negotiate.ts",
      "lib/http/representation.ts",
      "lib/pages/content.ts",
      "lib/pages/layout.ts",
      "lib/pages/markdown.ts",
      "lib/limit/core/decision.ts",
      "lib/limit/memory/memory_store.ts",
      "lib/limit/caller/caller_key.ts",
      "lib/respond/response_cache.ts",
    ]
  ) {
    assert.ok(shared.includes(module), `${module} is not run by the Worker: ${shared.join(", ")}`);
  }
  const uses: string[] = [];
  for (const file of shared) {
    uses.push(...runtimeApiUses(await Deno.readTextFile(join(ROOT, file)), file));
  }
  assert.deepEqual(uses, []);
  // And no module outside the two entry folders imports cloudflare:, whatever runs it.
  const cloudflare: string[] = [];
  for (const file of await libFiles()) {
    if (PLATFORM_FOLDERS.some((folder) => file.startsWith(folder))) continue;
    cloudflare.push(
      ...runtimeApiUses(await Deno.readTextFile(join(ROOT, file)), file).filter((use) =>
        use.includes("cloudflare:")
      ),
    );
  }
  assert.deepEqual(cloudflare, []);
});

/**
 * The folders Node's entry reaches that may use Deno's API: Deno KV's backend, which only Deno has
 * (`lib/node/main.ts` refuses `RATE_LIMIT_STORE=kv` before any store opens).
 */
const DENO_ONLY_ON_NODE = ["lib/limit/kv/"];

Deno.test("Node's entry runs no Deno API outside lib/node/ but Deno KV's backend, which it refuses", async () => {
  const modules = await runtimeModules(["lib/node/main.ts"]);
  // The handler and the store's composition root are what Node runs.
  for (const module of ["lib/handler.ts", "lib/limit/open_store.ts", "lib/node/serve.ts"]) {
    assert.ok(modules.includes(module), `${module} is not run by Node's entry`);
  }
  const uses: string[] = [];
  for (const file of modules) {
    if (DENO_ONLY_ON_NODE.some((folder) => file.startsWith(folder))) continue;
    uses.push(...runtimeApiUses(await Deno.readTextFile(join(ROOT, file)), file));
  }
  assert.deepEqual(uses.filter((use) => !use.startsWith("lib/node/")), []);
});
