/**
 * The documentation stays true: every relative link and `#anchor` in every Markdown file resolves
 * (anchors by GitHub's heading slugs, from `github-slugger`), README's configuration table lists
 * exactly the variables `lib/config/` reads, every task in deno.json is mentioned in README.md or a
 * document it links, README's quick-start `curl` lines answer 200 from a started service, README
 * stays short, README counts and lists the error codes `lib/errors.ts` has, and every section a code
 * comment cites (`(lib/README.md, "Cold start")`) exists.
 *
 * @module
 */

import assert from "node:assert/strict";
import GithubSlugger from "npm:github-slugger@2.0.0";
import { marked, type Token, type Tokens } from "marked";
import { loadConfig } from "../lib/config/config.ts";
import { ENV_NAMES, type EnvName } from "../lib/config/env.ts";
import { ERROR_CODES, errorCatalog } from "../lib/errors.ts";
import { startService } from "./_service_process.ts";
import { findTool } from "./_tools.ts";

const ROOT = new URL("..", import.meta.url).pathname;
/** Folders that hold no documentation of the project: built output, caches, screenshots. */
const SKIPPED = new Set([".git", "node_modules", "dist", "tests/screenshots"]);

/** A Markdown file's path (relative to the root) and text. */
interface MarkdownFile {
  path: string;
  text: string;
}

/** Every Markdown file of the project, by its path relative to the root. */
async function markdownFiles(dir = ""): Promise<MarkdownFile[]> {
  const files: MarkdownFile[] = [];
  for await (const entry of Deno.readDir(ROOT + dir)) {
    const path = dir + entry.name;
    if (SKIPPED.has(path)) continue;
    if (entry.isDirectory) files.push(...await markdownFiles(`${path}/`));
    else if (entry.name.endsWith(".md")) {
      files.push({ path, text: await Deno.readTextFile(ROOT + path) });
    }
  }
  return files;
}

/** The text a heading shows (GitHub slugs that, not its Markdown source). */
function plainText(tokens: readonly Token[]): string {
  return tokens.map((token) => {
    if (token.type === "html") return "";
    if ("tokens" in token && token.tokens) return plainText(token.tokens);
    return "text" in token ? String(token.text) : "";
  }).join("");
}

/** The ids GitHub gives the headings of `text`. */
function anchorsOf(text: string): Set<string> {
  const slugger = new GithubSlugger();
  const anchors = new Set<string>();
  marked.walkTokens(marked.lexer(text), (token) => {
    if (token.type === "heading") anchors.add(slugger.slug(plainText(token.tokens ?? [])));
  });
  return anchors;
}

/** Every link and image target of `text`. */
function linksOf(text: string): string[] {
  const links: string[] = [];
  marked.walkTokens(marked.lexer(text), (token) => {
    if (token.type === "link" || token.type === "image") links.push(token.href);
  });
  return links;
}

/** Whether `href` points inside the repository (not a URL, not a page placeholder). */
function isRelative(href: string): boolean {
  return !/^[a-z][a-z0-9+.-]*:/i.test(href) && !href.startsWith("//") && !href.includes("{{");
}

/** `href` of a link in `from`, resolved to a path relative to the root, and its fragment. */
function resolve(from: string, href: string): { path: string; fragment: string | undefined } {
  const [target = "", fragment] = href.split("#", 2);
  const base = target.startsWith("/") ? "" : from.slice(0, from.lastIndexOf("/") + 1);
  const url = new URL(
    decodeURI(target) || from.slice(from.lastIndexOf("/") + 1),
    `file:///${base}`,
  );
  return {
    path: url.pathname.slice(1),
    fragment: fragment === undefined ? undefined : decodeURI(fragment),
  };
}

/** Why `href` in `from` does not resolve, or undefined when it does. */
async function brokenLink(from: string, href: string): Promise<string | undefined> {
  const { path, fragment } = resolve(from, href);
  try {
    await Deno.stat(ROOT + path);
  } catch {
    return `${from}: ${href}: no file ${path}`;
  }
  if (fragment === undefined || fragment === "") return undefined;
  if (!path.endsWith(".md")) return `${from}: ${href}: an anchor into a non-Markdown file`;
  const anchors = anchorsOf(await Deno.readTextFile(ROOT + path));
  return anchors.has(fragment) ? undefined : `${from}: ${href}: no heading #${fragment} in ${path}`;
}

Deno.test("every relative link and #anchor in every Markdown file resolves", async () => {
  const files = await markdownFiles();
  assert(files.some((file) => file.path === "README.md"), "README.md found");
  const broken: string[] = [];
  let checked = 0;
  for (const file of files) {
    for (const href of linksOf(file.text).filter(isRelative)) {
      checked++;
      const problem = await brokenLink(file.path, href);
      if (problem !== undefined) broken.push(problem);
    }
  }
  assert(checked > 0, "relative links found");
  assert.deepEqual(broken, []);
});

Deno.test("a link checker built on these helpers sees a broken anchor and a missing file", async () => {
  assert.equal(await brokenLink("README.md", "#configuration"), undefined);
  assert.equal(await brokenLink("lib/limit/README.md", "../../README.md#configuration"), undefined);
  assert.match(String(await brokenLink("README.md", "#no-such-section")), /no heading/);
  assert.match(String(await brokenLink("README.md", "missing/README.md")), /no file/);
  assert.deepEqual([...anchorsOf("# A `b:c` (d)\n## Twice\n## Twice\n")], [
    "a-bc-d",
    "twice",
    "twice-1",
  ]);
});

/** The files whose comments may cite a document's section. */
async function sourceFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(ROOT + dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) files.push(...await sourceFiles(path));
    else if (/\.(ts|sh|lua)$/.test(entry.name)) files.push(path);
  }
  return files;
}

/** The headings' texts of a Markdown document. */
function headingsOf(text: string): Set<string> {
  const headings = new Set<string>();
  marked.walkTokens(marked.lexer(text), (token) => {
    if (token.type === "heading") headings.add(plainText(token.tokens ?? []));
  });
  return headings;
}

/** Every `(<document>, "<section>")` citation in `source`, comment markers and line breaks removed. */
function citationsOf(source: string): { document: string; section: string }[] {
  const flat = source.replace(/\n\s*(?:\*|\/\/|#)\s?/g, " ");
  return [...flat.matchAll(/([\w./-]*README(?:\.md)?),? "([^"]+)"/g)].map((m) => ({
    document: m[1]!.endsWith(".md") ? m[1]! : `${m[1]}.md`,
    section: m[2]!,
  }));
}

Deno.test("every document section a code comment cites is a heading of that document", async () => {
  const files = ["main.ts", ...await sourceFiles("lib"), ...await sourceFiles("tests")]
    .map((path) => path.replace(/^\//, ""))
    .filter((path) => path !== "tests/docs_test.ts");
  const missing: string[] = [];
  let cited = 0;
  for (const file of files) {
    for (const { document, section } of citationsOf(await Deno.readTextFile(ROOT + file))) {
      cited++;
      let headings: Set<string>;
      try {
        headings = headingsOf(await Deno.readTextFile(ROOT + document));
      } catch {
        missing.push(`${file}: ${document} does not exist`);
        continue;
      }
      if (!headings.has(section)) missing.push(`${file}: ${document} has no heading "${section}"`);
    }
  }
  assert(cited > 0, "citations found");
  assert.deepEqual(missing, []);
  assert.deepEqual(citationsOf('x (README, "Cold\n * start") y'), [
    { document: "README.md", section: "Cold start" },
  ]);
});

Deno.test("README.md stays a front door: at most 300 lines, one short sentence per variable", async () => {
  const readme = await Deno.readTextFile(`${ROOT}README.md`);
  const lines = readme.split("\n").length - 1;
  assert(lines <= 300, `README.md has ${lines} lines; move the depth to a linked document`);
  const table = readmeSection(readme, "Configuration").find((t) => t.type === "table") as
    | Tokens.Table
    | undefined;
  assert(table !== undefined, "README's Configuration section has a table");
  const long = table.rows.filter((row) => (row.at(-1)?.text.length ?? 0) > 90)
    .map((row) => row[0]!.text);
  assert.deepEqual(long, [], "rows whose meaning is over 90 characters: link the details instead");
});

/** Numbers as README writes them, in words. */
const NUMBER_WORDS = [
  "zero",
  "one",
  "two",
  "three",
  "four",
  "five",
  "six",
  "seven",
  "eight",
  "nine",
  "ten",
];

Deno.test("README counts the stable error codes lib/errors.ts has, and lists each with its status", async () => {
  const readme = await Deno.readTextFile(`${ROOT}README.md`);
  const counted = /with (\w+) stable codes/.exec(readme)?.[1];
  assert.equal(counted, NUMBER_WORDS[ERROR_CODES.length], "README's count of error codes");
  const loaded = loadConfig(() => undefined);
  assert(loaded.ok);
  const catalog = errorCatalog(loaded.config);
  const listed = readme.replace(/\s+/g, " ");
  for (const code of ERROR_CODES) {
    assert.match(listed, new RegExp(`\`${code}\` \\(${catalog[code].status}[,)]`), code);
  }
});

/** The section of README.md under the level-2 heading `title`: its tokens. */
function readmeSection(readme: string, title: string): Token[] {
  const tokens = marked.lexer(readme);
  const start = tokens.findIndex((t) => t.type === "heading" && t.depth === 2 && t.text === title);
  assert(start >= 0, `README.md has a "## ${title}" section`);
  const end = tokens.findIndex((t, i) => i > start && t.type === "heading" && t.depth <= 2);
  return tokens.slice(start + 1, end < 0 ? undefined : end);
}

/** The variable names of README's configuration table (its first column). */
function documentedVariables(readme: string): string[] {
  const table = readmeSection(readme, "Configuration").find((t) => t.type === "table") as
    | Tokens.Table
    | undefined;
  assert(table !== undefined, "README's Configuration section has a table");
  assert.equal(table.header[0]?.text, "Variable");
  return table.rows.map((row) => row[0]!.text.replace(/^`|`$/g, ""));
}

/** Every name `loadConfig` asks its environment for, over settings that take each branch. */
function variablesConfigReads(): Set<string> {
  const asked = new Set<string>();
  const settings: Partial<Record<EnvName, string>>[] = [
    {},
    { RATE_LIMIT_STORE: "redis", REDIS_URL: "redis://127.0.0.1:6379" },
    {
      RATE_LIMIT_STORE: "kv",
      KV_PATH: "/tmp/limits.sqlite",
      RATE_LIMIT_CONSISTENCY: "local-first",
    },
    { DEPRECATION_DATE: "2030-01-01", SUNSET_DATE: "2031-01-01", TRUSTED_PROXIES: "127.0.0.1" },
  ];
  for (const env of settings) {
    loadConfig((name) => {
      asked.add(name);
      return env[name];
    });
  }
  return asked;
}

Deno.test("README's configuration table lists exactly the variables lib/config/ reads", async () => {
  const readme = await Deno.readTextFile(`${ROOT}README.md`);
  const documented = documentedVariables(readme);
  let source = "";
  for await (const entry of Deno.readDir(`${ROOT}lib/config`)) {
    source += await Deno.readTextFile(`${ROOT}lib/config/${entry.name}`);
  }
  // Anything read past the Env lookup (ENV_NAMES, which denoEnv serves) would be a direct read.
  const direct = [...source.matchAll(/Deno\.env\.get\(\s*"([^"]+)"/g)].map((m) => m[1]!);
  const read = new Set([...variablesConfigReads(), ...ENV_NAMES, ...direct]);
  assert.equal(new Set(documented).size, documented.length, "no variable is listed twice");
  assert.deepEqual(
    documented.filter((name) => !read.has(name)),
    [],
    "listed in README but not read by lib/config/",
  );
  assert.deepEqual(
    [...read].filter((name) => !documented.includes(name)),
    [],
    "read by lib/config/ but not in README's table",
  );
});

Deno.test("every deno.json task is mentioned in README.md or a document it links", async () => {
  const config = JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`));
  const tasks = Object.keys(config.tasks as Record<string, string>);
  const readme = await Deno.readTextFile(`${ROOT}README.md`);
  const linked = new Set(
    linksOf(readme).filter(isRelative).map((href) => resolve("README.md", href).path)
      .filter((path) => path.endsWith(".md")),
  );
  const texts = [readme, ...await Promise.all([...linked].map((p) => Deno.readTextFile(ROOT + p)))];
  const mentioned = (task: string) => {
    const pattern = new RegExp(
      `deno task ${task.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(?![\\w:-])`,
    );
    return texts.some((text) => pattern.test(text));
  };
  assert(tasks.length > 10, "deno.json's tasks read");
  assert.deepEqual(tasks.filter((task) => !mentioned(task)), [], "tasks no document mentions");
});

/** The words of a shell command line: single and double quotes, no expansion. */
function shellWords(line: string): string[] {
  return [...line.matchAll(/'([^']*)'|"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3]!);
}

/** README's quick-start `curl` command lines. */
function quickStartCurls(readme: string): string[][] {
  return readmeSection(readme, "Quick start")
    .filter((t): t is Tokens.Code => t.type === "code")
    .flatMap((block) => block.text.split("\n"))
    .map((line) => line.replace(/\s+#.*$/, "").trim())
    .filter((line) => line.startsWith("curl "))
    .map(shellWords);
}

const curl = findTool("curl");

Deno.test({
  name: "README's quick-start curl lines answer 200 from a started service" +
    (curl === undefined ? " (skipped: curl is not installed; apt-get install curl)" : ""),
  ignore: curl === undefined && Deno.env.get("CI") !== "true",
  async fn() {
    assert(curl !== undefined, "curl is installed (apt-get install curl)");
    const readme = await Deno.readTextFile(`${ROOT}README.md`);
    const commands = quickStartCurls(readme);
    assert(commands.length >= 2, `README's quick start has curl lines, found ${commands.length}`);
    const service = await startService({});
    try {
      for (const words of commands) {
        const args = words.slice(1).map((word) =>
          word.replace(/^http:\/\/localhost:8000(?=\/|$)/, service.url)
        );
        assert(
          args.some((word) => word.startsWith(service.url)),
          `${words.join(" ")}: a local URL`,
        );
        const output = await new Deno.Command(curl, {
          args: ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", ...args],
          stdout: "piped",
          stderr: "piped",
        }).output();
        const status = new TextDecoder().decode(output.stdout);
        assert.equal(
          status,
          "200",
          `${words.join(" ")}: ${new TextDecoder().decode(output.stderr)}`,
        );
      }
    } finally {
      await service.stop();
    }
  },
});
