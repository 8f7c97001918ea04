/**
 * Tests of `lib/pages/api_reference.ts`: the reference generated from OpenAPI documents, a small made-up one
 * for the rules and the served one for coverage.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  apiReferenceMarkdown,
  codeSpan,
  curlCommand,
  firstSentence,
  resolveRef,
  shellWord,
  tableCell,
} from "../../lib/pages/api_reference.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { loadContent } from "../../lib/pages/content.ts";
import { EXPOSED_FIELDS } from "../_server.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

const HEADER = (description: string, example: string) => ({
  description,
  schema: { type: "string" },
  example,
});

/** A two-path document: a negotiated JSON/Markdown resource and a fixed text one. */
function smallDocument() {
  const common = {
    "RateLimit": { $ref: "#/components/headers/RateLimit" },
  };
  return {
    openapi: "3.1.0",
    info: { title: "t", version: "2.3.4" },
    servers: [{ url: "https://api.example.com/" }],
    paths: {
      "/things": {
        summary: "Things",
        description: "All the things.",
        get: {
          summary: "Get things",
          parameters: [{ $ref: "#/components/parameters/Accept" }],
          responses: {
            "200": { $ref: "#/components/responses/ThingsOk" },
            "404": { $ref: "#/components/responses/NotFound" },
          },
        },
        head: {
          summary: "Headers of things",
          responses: { "404": { $ref: "#/components/responses/NotFound" } },
        },
      },
      "/notes.txt": {
        get: {
          description: "Notes. More words.",
          responses: {
            "200": {
              description: "The notes. As text.",
              headers: { ...common, "Retry-After": { $ref: "#/components/headers/RetryAfter" } },
              content: { "text/plain; charset=utf-8": { schema: { type: "string" } } },
            },
            "404": { $ref: "#/components/responses/NotFound" },
          },
        },
      },
    },
    components: {
      parameters: { Accept: { name: "Accept", in: "header", schema: { type: "string" } } },
      headers: {
        RateLimit: HEADER("Quota | state.", '"default";r=1;t=2'),
        RetryAfter: HEADER("Seconds to wait.", "42"),
        Link: {
          description: "Links.",
          schema: { type: "string" },
          examples: { one: { value: '<https://x/p>; rel="deprecation"' } },
        },
      },
      responses: {
        ThingsOk: {
          description: "The things. `application/json` by default.",
          headers: { ...common, "Link": { $ref: "#/components/headers/Link" } },
          content: {
            "application/json": { schema: { type: "object" } },
            "text/markdown; charset=utf-8": { schema: { type: "string" } },
          },
        },
        NotFound: {
          description: "Error `not_found`: no such path. Really.",
          headers: common,
          content: {
            "application/json": {
              examples: { nf: { value: { error: { code: "not_found", message: "", hint: "" } } } },
            },
          },
        },
      },
    },
  };
}

Deno.test("apiReferenceMarkdown() lists each path with its operations and representations, default first", () => {
  const md = apiReferenceMarkdown(smallDocument());
  assert.match(md, /^## API reference\n/);
  assert.match(md, /### `\/things`\n\n\*\*Things\.\*\* All the things\./);
  assert.match(md, /- `GET`: Get things\n- `HEAD`: Headers of things\n/);
  assert.match(
    md,
    /Representations: `application\/json` \(default\), `text\/markdown; charset=utf-8`\./,
  );
  assert.match(md, /Request headers: `Accept`\./);
  // An operation without a summary is described by the first sentence of its description.
  assert.match(md, /- `GET`: Notes\.\n/);
  assert.match(md, /API version 2\.3\.4/);
});

Deno.test("apiReferenceMarkdown() gives a copyable curl command per representation", () => {
  const md = apiReferenceMarkdown(smallDocument());
  assert.match(md, /JSON \(default\):\n\n```sh\ncurl -s https:\/\/api\.example\.com\/things\n```/);
  assert.match(
    md,
    /Markdown:\n\n```sh\ncurl -s -H 'Accept: text\/markdown' https:\/\/api\.example\.com\/things\n```/,
  );
  assert.match(
    md,
    /Plain text \(default\):\n\n```sh\ncurl -s https:\/\/api\.example\.com\/notes\.txt\n```/,
  );
});

Deno.test("apiReferenceMarkdown() names the fields every response carries once and the others per status", () => {
  const md = apiReferenceMarkdown(smallDocument());
  assert.match(md, /Every response carries `RateLimit`; the tables below/);
  assert.match(md, /\| 200 \| GET \| The things\. \| `Link` \|/);
  assert.match(md, /\| 200 \| GET \| The notes\. \| `Retry-After` \|/);
});

Deno.test("apiReferenceMarkdown() lists a status answered alike on every path once, not per path", () => {
  const md = apiReferenceMarkdown(smallDocument());
  // GET and HEAD on /things answer 404, only GET on /notes.txt: not alike, so listed per path.
  assert.match(md, /\| 404 \| GET, HEAD \| Error `not_found`: no such path\. \| - \|/);
  assert.match(md, /\| 404 \| GET \| Error `not_found`: no such path\. \| - \|/);

  const doc = smallDocument();
  delete (doc.paths["/things"] as { head?: unknown }).head;
  const alike = apiReferenceMarkdown(doc);
  assert.match(
    alike,
    /Every path answers these the same way:\n\n\| Status \|[^\n]*\n[^\n]*\n\| 404 \| GET \|/,
  );
  assert.equal(alike.match(/\| 404 \| GET/g)?.length, 1);
  assert.match(alike, /Also 404, as on every path \(above\)\./);
});

Deno.test("apiReferenceMarkdown() describes every response header field with its example", () => {
  const md = apiReferenceMarkdown(smallDocument());
  assert.match(md, /### Response header fields/);
  assert.match(md, /\| `RateLimit` \| Quota \\\| state\. \| `"default";r=1;t=2` \|/);
  assert.match(md, /\| `Retry-After` \| Seconds to wait\. \| `42` \|/);
  // A header with named examples shows the first of them.
  assert.match(md, /\| `Link` \| Links\. \| `<https:\/\/x\/p>; rel="deprecation"` \|/);
});

Deno.test("apiReferenceMarkdown() lists error codes from the examples, with their status", () => {
  const md = apiReferenceMarkdown(smallDocument());
  assert.match(md, /### Error codes/);
  assert.match(md, /\| `not_found` \| 404 \| No such path\. \|/);
});

Deno.test("apiReferenceMarkdown() nests under a chosen heading level", () => {
  const md = apiReferenceMarkdown(smallDocument(), { heading: 3 });
  assert.match(md, /^### API reference\n/);
  assert.match(md, /\n#### `\/things`\n/);
});

Deno.test("apiReferenceMarkdown() rejects a document without paths or with a dangling $ref", () => {
  assert.throws(() => apiReferenceMarkdown({ openapi: "3.1.0" }), /no paths object/);
  const doc = smallDocument();
  doc.paths["/things"].get.responses["200"] = { $ref: "#/components/responses/Missing" };
  assert.throws(
    () => apiReferenceMarkdown(doc),
    /does not resolve: #\/components\/responses\/Missing/,
  );
});

Deno.test("resolveRef() follows chains and refuses loops and remote references", () => {
  const doc = { a: { $ref: "#/b" }, b: { $ref: "#/c~1d" }, "c/d": { x: 1 }, l: { $ref: "#/l" } };
  assert.deepEqual(resolveRef(doc, { $ref: "#/a" }), { x: 1 });
  assert.throws(() => resolveRef(doc, { $ref: "#/l" }), /loop/);
  assert.throws(() => resolveRef(doc, { $ref: "other.json#/a" }), /only local/);
});

Deno.test("firstSentence() stops at a sentence end, not at an abbreviation or inside code", () => {
  assert.equal(firstSentence("A page. `text/html` by default."), "A page.");
  assert.equal(
    firstSentence("Use it (e.g. for browsers). Then more."),
    "Use it (e.g. for browsers).",
  );
  assert.equal(firstSentence("One sentence only"), "One sentence only");
  assert.equal(firstSentence("Has `a. B` inside."), "Has `a. B` inside.");
});

Deno.test("tableCell(), codeSpan() and shellWord() keep Markdown and shell syntax intact", () => {
  assert.equal(tableCell("a | b\nc"), "a \\| b c");
  assert.equal(codeSpan("plain"), "`plain`");
  assert.equal(codeSpan("has ` tick"), "``has ` tick``");
  assert.equal(codeSpan("`edge"), "`` `edge ``");
  assert.equal(shellWord("https://x.example/a?b"), "'https://x.example/a?b'");
  assert.equal(shellWord("https://x.example/a"), "https://x.example/a");
  assert.equal(shellWord("it's"), "'it'\\''s'");
});

Deno.test("curlCommand() sends Accept with the media type's essence for non-default representations", () => {
  assert.equal(curlCommand("https://x/p", "application/json", true), "curl -s https://x/p");
  assert.equal(
    curlCommand("https://x/p", "text/markdown; charset=utf-8", false),
    "curl -s -H 'Accept: text/markdown' https://x/p",
  );
});

Deno.test("the served OpenAPI document yields a reference of every path, RateLimit and deprecation fields and every error code", () => {
  const config = loadConfig(recordEnv({ PUBLIC_BASE_URL: "https://portal.example" }));
  assert.ok(config.ok);
  const content = loadContent(config.config, DISK_STATIC_FILES);
  assert.ok(content.ok);
  const document = JSON.parse(content.content.openapi);
  const md = apiReferenceMarkdown(document);
  for (const path of Object.keys(document.paths)) assert.ok(md.includes(`### \`${path}\``), path);
  for (const field of EXPOSED_FIELDS) {
    assert.ok(md.includes(`| \`${field}\` |`), field);
  }
  for (const code of ["not_found", "method_not_allowed", "rate_limited", "internal_error"]) {
    assert.ok(md.includes(`| \`${code}\` |`), code);
  }
  assert.ok(
    md.includes("curl -s -H 'Accept: text/markdown' https://portal.example/api/v1/platform"),
  );
  assert.ok(md.includes("curl -s https://portal.example/api/v1/platform\n"));
});
