/**
 * The reference servers of the load benchmark, in one process (pinned to the server core by
 * `load.ts`): for every scenario a "ceiling" listener that answers the very status, header fields and
 * body the service answers for that request, by cloning one prebuilt `Response` with the body as a
 * string (the fastest constant-response method measured), and one bare listener that answers the
 * platform JSON with a single `content-type` field the same way.
 *
 * With `--explore`, more listeners answer the JSON scenario with variations of the ceiling (fewer
 * fields, other ways of building the response), so that what each idea is worth is measured under
 * the same conditions.
 *
 * Prints one line `READY {"name": port, ...}` on stdout when every listener is up.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { createHandler } from "../../lib/handler.ts";
import { type Config, loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { loadContent } from "../../lib/pages/content.ts";
import { policyOf } from "../../lib/limit/core/decision.ts";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";
import { sendableBody } from "../../lib/respond/response_cache.ts";
import { callerAddress, SCENARIOS } from "./_scenarios.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

/** The configuration and a handler of the service under `env` (the benchmark's plus a scenario's). */
function service(extra: Record<string, string> = {}) {
  const loaded = loadConfig(recordEnv({ ...Deno.env.toObject(), ...extra }));
  if (!loaded.ok) throw new Error(loaded.errors.join("; "));
  const config: Config = loaded.config;
  const contentResult = loadContent(config, DISK_STATIC_FILES);
  if (!contentResult.ok) throw new Error(contentResult.errors.join("; "));
  const store = new MemoryStore(policyOf(config), { sweep: false });
  const handler = createHandler({ config, content: contentResult.content, store });
  return { config, contentResult, handler };
}
const { config, contentResult, handler: defaultHandler } = service();
const peer = { remoteAddr: { hostname: "127.0.0.1" } };

interface Captured {
  status: number;
  headers: [string, string][];
  body: Uint8Array<ArrayBuffer>;
}

/** The fastest body to clone: text as a string (as the service keeps it), else the bytes. */
function fastest(c: Captured): Uint8Array<ArrayBuffer> | string {
  return sendableBody(c.body, c.headers.some(([name]) => name === "content-encoding"));
}

/** What the service answers to the scenario's request (a caller's first request; for 429 its 61st). */
async function capture(scenario: typeof SCENARIOS[number]): Promise<Captured> {
  const handler = scenario.env ? service(scenario.env).handler : defaultHandler;
  const headers = new Headers({ "x-forwarded-for": callerAddress(12345, scenario.callers) });
  if (scenario.accept !== null) headers.set("accept", scenario.accept);
  const url = `http://${config.hostname}:${config.port}${scenario.path}`;
  let response = await handler(new Request(url, { headers }), peer);
  while (response.status !== scenario.status && response.status === 200) {
    await response.body?.cancel();
    response = await handler(new Request(url, { headers }), peer);
  }
  if (response.status !== scenario.status) {
    throw new Error(`${scenario.name}: the service answered ${response.status}`);
  }
  return {
    status: response.status,
    headers: [...response.headers],
    body: new Uint8Array(await response.arrayBuffer()),
  };
}

type Serve = (request: Request, info: Deno.ServeHandlerInfo) => Response;

function cloning(c: Captured, transform: (h: [string, string][]) => [string, string][] = (h) => h) {
  const prebuilt = new Response(fastest(c), { status: c.status, headers: transform(c.headers) });
  return (() => prebuilt.clone()) satisfies Serve;
}

const listeners: Record<string, Serve> = {};
const captured: Record<string, Captured> = {};
for (const scenario of SCENARIOS) {
  const c = await capture(scenario);
  captured[scenario.name] = c;
  listeners[`ceiling-${scenario.name}`] = cloning(c);
}
const json = captured["json"]!;
listeners["bare"] = cloning({
  status: 200,
  headers: [["content-type", "application/json"]],
  body: json.body,
});

// The ceiling plus the reads any real service of this spec must make (the method, the path for the
// route, Host, which RFC 9112 requires a server to check, Accept, Accept-Encoding, If-None-Match, the
// forwarded caller, the peer address), and nothing else: the part of the gap to the ceiling that no
// handler code can close. Started with --explore or --floor.
const readsOnly = cloning(json);
if (Deno.args.includes("--explore") || Deno.args.includes("--floor")) {
  listeners["x-ceiling-plus-reads"] = ((request: Request, info: Deno.ServeHandlerInfo) => {
    const headers = request.headers;
    const seen = request.method.length + request.url.length + (headers.get("host")?.length ?? 0) +
      (headers.get("accept")?.length ?? 0) +
      (headers.get("accept-encoding")?.length ?? 0) + (headers.get("if-none-match")?.length ?? 0) +
      (headers.get("x-forwarded-for")?.length ?? 0) +
      (info.remoteAddr as Deno.NetAddr).hostname.length;
    if (seen < 0) throw new Error("unreachable");
    return readsOnly();
  }) as Serve;
}

if (Deno.args.includes("--explore")) {
  const without = (...names: string[]) => (h: [string, string][]) =>
    h.filter(([name]) => !names.includes(name));
  const only = (...names: string[]) => (h: [string, string][]) =>
    h.filter(([name]) => names.includes(name));
  // CORS exposure only when the request carries Origin: the field goes, Vary gains Origin.
  listeners["x-no-expose"] = cloning(
    json,
    (h) =>
      without("access-control-expose-headers")(h).map(([n, v]) =>
        n === "vary" ? [n, `${v}, Origin`] : [n, v]
      ),
  );
  listeners["x-no-policy"] = cloning(json, without("ratelimit-policy"));
  listeners["x-no-expose-no-policy"] = cloning(
    json,
    without("access-control-expose-headers", "ratelimit-policy"),
  );
  // The spec's required fields only (section 4 and 8).
  listeners["x-spec-min"] = cloning(
    json,
    only(
      "content-type",
      "ratelimit",
      "ratelimit-limit",
      "ratelimit-remaining",
      "ratelimit-reset",
      "vary",
      "link",
    ),
  );
  // Other ways of building the same response, for comparison with clone().
  const prebuiltHeaders = new Headers(json.headers);
  listeners["x-new-headers"] = () =>
    new Response(json.body, { status: json.status, headers: prebuiltHeaders });
  listeners["x-new-literal"] = () =>
    new Response(json.body, { status: json.status, headers: Object.fromEntries(json.headers) });
  // Where the reads' cost comes from: asking for the request's headers at all, then one field.
  listeners["x-headers-touched"] = ((request: Request) => {
    if (request.headers === null) throw new Error("unreachable");
    return readsOnly();
  }) as Serve;
  listeners["x-one-header-read"] = ((request: Request) => {
    if ((request.headers.get("accept")?.length ?? 0) < 0) throw new Error("unreachable");
    return readsOnly();
  }) as Serve;
  // The service's own handler with a limiter that does no work: it hands out the decisions a
  // caller's first to last admitted request gets, in turn, so that the response cache holds as many
  // entries as under the real limiter. Against the service: what the limiter's look-up costs.
  const decisions = Array.from({ length: config.rateLimit }, (_, i) => ({
    allowed: true,
    remaining: config.rateLimit - 1 - i,
    resetSeconds: config.rateLimitWindowSeconds,
  }));
  let turn = 0;
  const next = () => decisions[turn++ % decisions.length]!;
  const noLimiter = createHandler({
    config,
    content: contentResult.content,
    store: { hit: next, peek: next, close: () => {} },
  });
  listeners["x-handler-no-limiter"] = ((request: Request, info: Deno.ServeHandlerInfo) =>
    noLimiter(request, info)) as Serve;
  const prebuiltBytes = new Response(json.body, { status: json.status, headers: json.headers });
  listeners["x-clone-bytes-body"] = () => prebuiltBytes.clone();
}

const ports: Record<string, number> = {};
for (const [name, serve] of Object.entries(listeners)) {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, serve);
  ports[name] = server.addr.port;
}
console.log(`READY ${JSON.stringify(ports)}`);
