/**
 * Agent readiness (issue 33), on a real server: llms.txt's links fetched as an agent fetches them
 * (no `Accept` of its own), the token count of every Markdown body against the tokenizer itself,
 * the Content Signals in robots.txt and on responses, `CONTENT_SIGNAL` validated at start-up, and
 * the sitemap checked by an XML validator.
 *
 * @module
 */

import assert from "node:assert/strict";
import { countTokens } from "npm:gpt-tokenizer@4.0.0/encoding/o200k_base";
import { XMLParser, XMLValidator } from "npm:fast-xml-parser@5.12.1";
import { loadContent } from "../lib/pages/content.ts";
import { startServer, testConfig } from "./_server.ts";
import { DISK_STATIC_FILES } from "../lib/server/static_files.ts";

const ROOT = new URL("../", import.meta.url).pathname;

/** Every path whose 200 is Markdown (or llms.txt), with the `Accept` that selects it. */
const MARKDOWN_PATHS: ReadonlyArray<[string, string | undefined]> = [
  ["/index.html.md", undefined],
  ["/developers.md", undefined],
  ["/api.md", undefined],
  ["/developers/deprecation-policy.md", undefined],
  ["/llms.txt", undefined],
  ["/", "text/markdown"],
  ["/developers", "text/markdown"],
  ["/api", "text/markdown"],
  ["/developers/deprecation-policy", "text/markdown"],
  ["/api/v1/platform", "text/markdown"],
];

Deno.test("a plain fetch of every link in llms.txt gets Markdown or JSON, never HTML", async () => {
  await using server = await startServer({ env: { RATE_LIMIT: "1000" } });
  const base = server.config.baseUrl;
  const llms = await (await fetch(`${server.url}/llms.txt`)).text();
  const links = [...llms.matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1]!);
  const own = links.filter((link) => link.startsWith(`${base}/`));
  // The others are mailto: (support), which no agent fetches.
  assert.deepEqual(links.filter((link) => !own.includes(link)), [server.config.supportUrl]);
  assert.ok(own.length >= 8, `${own.length} links`);
  for (const link of own) {
    // fetch sends `Accept: */*`, as an agent that sets nothing does.
    const response = await fetch(server.url + link.slice(base.length));
    await response.body?.cancel();
    assert.equal(response.status, 200, link);
    assert.match(
      response.headers.get("content-type") ?? "",
      /^(text\/markdown|application\/(json|linkset\+json|xml)|text\/plain)/,
      link,
    );
    assert.doesNotMatch(response.headers.get("content-type") ?? "", /html/, link);
  }
  assert.ok(own.includes(`${base}/developers.md`) && own.includes(`${base}/index.html.md`));
});

Deno.test("x-markdown-tokens of every Markdown body is its o200k_base token count, on 200, HEAD and 304 alike", async () => {
  await using server = await startServer({ env: { RATE_LIMIT: "1000" } });
  for (const [path, accept] of MARKDOWN_PATHS) {
    const headers: Record<string, string> = accept ? { accept } : {};
    const response = await fetch(server.url + path, { headers });
    const body = await response.text();
    assert.match(response.headers.get("content-type") ?? "", /^text\/(markdown|plain)/, path);
    const tokens = response.headers.get("x-markdown-tokens");
    assert.equal(tokens, String(countTokens(body)), path);
    const head = await fetch(server.url + path, { method: "HEAD", headers });
    assert.equal(head.headers.get("x-markdown-tokens"), tokens, `${path} HEAD`);
    const etag = response.headers.get("etag")!;
    const revalidated = await fetch(server.url + path, {
      headers: { ...headers, "if-none-match": etag },
    });
    assert.equal(revalidated.status, 304, path);
    assert.equal(revalidated.headers.get("x-markdown-tokens"), tokens, `${path} 304`);
  }
  // JSON and HTML carry none.
  const json = await fetch(`${server.url}/api/v1/platform`);
  await json.body?.cancel();
  assert.equal(json.headers.get("x-markdown-tokens"), null);
});

Deno.test("the Markdown twins link to twins, and the pages announce them with <link> and Link", async () => {
  await using server = await startServer({ env: { RATE_LIMIT: "1000" } });
  const base = server.config.baseUrl;
  const home = await (await fetch(`${server.url}/index.html.md`)).text();
  assert.ok(home.includes(`](${base}/developers.md)`), home);
  assert.ok(home.includes(`](${base}/developers/deprecation-policy.md)`));
  assert.doesNotMatch(home, new RegExp(`\\]\\(${base.replaceAll(".", "\\.")}/developers\\)`));
  for (
    const [page, twin] of [
      ["/", "/index.html.md"],
      ["/developers", "/developers.md"],
      ["/api", "/developers.md"],
    ] as const
  ) {
    const response = await fetch(server.url + page);
    const html = await response.text();
    assert.match(response.headers.get("content-type") ?? "", /^text\/html/);
    assert.ok(
      html.includes(`<link rel="alternate" type="text/markdown" href="${base}${twin}">`),
      page,
    );
    assert.ok(
      response.headers.get("link")?.startsWith(
        `<${base}${twin}>; rel="alternate"; type="text/markdown"`,
      ),
      page,
    );
  }
});

Deno.test("the content signal is in robots.txt, after the policy's comment, and on HTML and Markdown responses", async () => {
  for (
    const [env, signal] of [
      [undefined, "search=yes, ai-input=yes, ai-train=no"],
      ["ai-train=yes,search=no , ai-input=no", "search=no, ai-input=no, ai-train=yes"],
    ] as const
  ) {
    await using server = await startServer({
      env: { RATE_LIMIT: "1000", ...(env ? { CONTENT_SIGNAL: env } : {}) },
    });
    const robots = await (await fetch(`${server.url}/robots.txt`)).text();
    assert.match(robots, /^# ANY RESTRICTIONS EXPRESSED VIA CONTENT SIGNALS ARE EXPRESS$/m);
    assert.match(
      robots,
      new RegExp(`^User-agent: \\*\\nContent-Signal: ${signal}\\nAllow: /$`, "m"),
    );
    assert.match(robots, new RegExp(`^Sitemap: ${server.config.baseUrl}/sitemap\\.xml$`, "m"));
    for (const [path, accept] of [...MARKDOWN_PATHS, ["/developers", undefined] as const]) {
      const response = await fetch(server.url + path, { headers: accept ? { accept } : {} });
      await response.body?.cancel();
      assert.equal(response.headers.get("content-signal"), signal, path);
    }
    const json = await fetch(`${server.url}/api/v1/platform`);
    await json.body?.cancel();
    assert.equal(json.headers.get("content-signal"), null);
  }
});

Deno.test("robots.txt takes each configuration value on one line: none can add a rule", () => {
  // Past the configuration's own checks (a value with a line break is refused there too).
  const config = { ...testConfig(), name: "Acme\nDisallow: /\r\nUser-agent: evil" };
  const loaded = loadContent(config, DISK_STATIC_FILES);
  if (!loaded.ok) assert.fail(loaded.errors.join("\n"));
  const robots = loaded.content.robots;
  assert.doesNotMatch(robots, /^Disallow/m);
  assert.deepEqual(robots.match(/^User-agent:.*$/gm), ["User-agent: *"]);
  assert.match(robots, /^# Acme Disallow: \/ {2}User-agent: evil: the public developer portal/m);
});

for (
  const bad of ["search=maybe, ai-input=yes, ai-train=no", "search=yes, ai-input=yes", "yes"]
) {
  Deno.test(`CONTENT_SIGNAL=${JSON.stringify(bad)} stops start-up with one sentence naming it`, async () => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "main.ts", "--listen"],
      cwd: ROOT,
      env: {
        CONTENT_SIGNAL: bad,
        PORT: "0",
        PUBLIC_BASE_URL: "http://127.0.0.1:8000",
        HOSTNAME: "127.0.0.1",
        NO_COLOR: "1",
      },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
    const { code, stderr } = await child.output();
    clearTimeout(timer);
    const said = new TextDecoder().decode(stderr).trim();
    assert.equal(code, 1, said);
    // The service's one-problem message: its heading, then the sentence; no stack trace.
    assert.deepEqual(said.split("\n").slice(0, 1), [
      "Configuration is invalid (1 problem); nothing is served:",
    ]);
    assert.equal(said.split("\n").length, 2, said);
    assert.match(said, /^ {2}- CONTENT_SIGNAL must give search, ai-input and ai-train each once/m);
  });
}

Deno.test("/sitemap.xml is well-formed XML in the sitemaps.org namespace listing every page and its twin", async () => {
  await using server = await startServer({ env: { RATE_LIMIT: "1000" } });
  const response = await fetch(`${server.url}/sitemap.xml`);
  assert.equal(response.headers.get("content-type"), "application/xml; charset=utf-8");
  const xml = await response.text();
  assert.equal(XMLValidator.validate(xml), true);
  const parsed = new XMLParser({ ignoreAttributes: false }).parse(xml);
  assert.equal(parsed.urlset["@_xmlns"], "http://www.sitemaps.org/schemas/sitemap/0.9");
  const base = server.config.baseUrl;
  const locs = (parsed.urlset.url as Array<{ loc: string }>).map(({ loc }) => loc);
  assert.deepEqual(locs, [
    `${base}/`,
    `${base}/index.html.md`,
    `${base}/developers`,
    `${base}/developers.md`,
    `${base}/developers/deprecation-policy`,
    `${base}/developers/deprecation-policy.md`,
  ]);
  for (const loc of locs) {
    const page = await fetch(server.url + loc.slice(base.length));
    await page.body?.cancel();
    assert.equal(page.status, 200, loc);
  }
});
