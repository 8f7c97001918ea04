/**
 * The OpenAPI document the server serves: valid OpenAPI 3.1 by a real validator, complete (every path
 * of the route table, every error code, every header field the service sends), and consistent with
 * the configuration. Also checks that the contract check of `_contract.ts` has teeth: a response that
 * breaks the document must be rejected, or every test that relies on it proves nothing.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Validator } from "npm:@seriousme/openapi-schema-validator@2.11.0";
import { ERROR_CODES, errorCatalog } from "../lib/errors.ts";
import { buildAnswers } from "../lib/respond/paths.ts";
import { createContract, type OpenApiDocument } from "./_contract.ts";
import {
  type EnvRecord,
  rawRequest,
  type RawResponse,
  startServer,
  testContent,
} from "./_server.ts";

type Json = Record<string, unknown>;

/** Starts a server, fetches the document it serves, and stops the server. */
async function servedDocument(env: EnvRecord = {}) {
  await using server = await startServer({ env });
  const response = await fetch(`${server.url}/openapi.json`, {
    headers: { "accept-encoding": "identity" },
  });
  assert.equal(response.status, 200);
  const text = await response.text();
  return { text, document: JSON.parse(text) as OpenApiDocument, config: server.config };
}

function objectAt(value: unknown, ...path: string[]): Json {
  let node = value;
  for (const key of path) {
    assert.ok(typeof node === "object" && node !== null, `${path.join(".")}: object expected`);
    node = (node as Json)[key];
  }
  assert.ok(typeof node === "object" && node !== null, `${path.join(".")} is described`);
  return node as Json;
}

/** Follows one local `$ref`. */
function deref(document: OpenApiDocument, value: unknown): Json {
  const ref = (value as Json).$ref;
  if (typeof ref !== "string") return value as Json;
  return objectAt(document, ...ref.slice(2).split("/"));
}

const HTTP_METHODS = ["get", "head", "options", "put", "post", "delete", "patch", "trace"];

function operations(document: OpenApiDocument): Array<[string, string, Json]> {
  const out: Array<[string, string, Json]> = [];
  for (const [path, item] of Object.entries(document.paths)) {
    for (const method of HTTP_METHODS) {
      if (item[method] !== undefined) out.push([path, method, item[method] as Json]);
    }
  }
  return out;
}

Deno.test("the served document is valid OpenAPI 3.1 by @seriousme/openapi-schema-validator", async () => {
  const { document } = await servedDocument();
  const validator = new Validator();
  const result = await validator.validate(document);
  assert.deepEqual(result.errors, undefined);
  assert.equal(result.valid, true);
  assert.equal(validator.version, "3.1");
});

Deno.test("the validator rejects a broken document (so the test above can fail)", async () => {
  const { document } = await servedDocument();
  const broken = structuredClone(document);
  const platformGet = objectAt(broken, "paths", "/api/v1/platform", "get");
  platformGet.responses = { "200": { content: {} } }; // a response without its required description
  const missingInfo = structuredClone(document);
  delete missingInfo.info;
  for (const candidate of [broken, missingInfo]) {
    const result = await new Validator().validate(candidate);
    assert.equal(result.valid, false);
  }
});

Deno.test("the document has info.version 1.0.0, OpenAPI 3.1.x and no unfilled placeholder", async () => {
  const { document, text } = await servedDocument();
  assert.match(document.openapi, /^3\.1\.\d+$/);
  assert.equal(objectAt(document, "info").version, "1.0.0");
  assert.ok(!text.includes("{{"), "every {{placeholder}} is filled");
});

Deno.test("/openapi serves the same document as /openapi.json", async () => {
  await using server = await startServer();
  const a = await rawRequest(server.url, "/openapi.json");
  const b = await rawRequest(server.url, "/openapi");
  assert.equal(a.status, 200);
  assert.deepEqual(a.body, b.body);
});

Deno.test("GET /api/v1/platform is operation getServicePlatform with JSON and Markdown", async () => {
  const { document } = await servedDocument();
  const ids = operations(document).map(([, , op]) => op.operationId);
  assert.equal(new Set(ids).size, ids.length, "operationIds are unique");
  const get = objectAt(document, "paths", "/api/v1/platform", "get");
  assert.equal(get.operationId, "getServicePlatform");
  const ok = deref(document, objectAt(get, "responses", "200"));
  const content = objectAt(ok, "content");
  assert.deepEqual(
    objectAt(content, "application/json", "schema"),
    { $ref: "#/components/schemas/Platform" },
  );
  assert.equal(
    Object.keys(content).filter((type) => type.startsWith("text/markdown")).length,
    1,
    "a Markdown representation is described",
  );
  const platform = objectAt(document, "components", "schemas", "Platform");
  assert.deepEqual([...platform.required as string[]].sort(), [
    "agentInstructions",
    "description",
    "developerResources",
    "documentation",
    "name",
    "openapi",
    "support",
  ]);
  const properties = objectAt(platform, "properties");
  for (
    const uri of ["documentation", "developerResources", "openapi", "agentInstructions", "support"]
  ) {
    assert.equal(objectAt(properties, uri).format, "uri", `${uri} is a URI`);
  }
});

Deno.test("servers[0].url is the configured public base URL", async () => {
  for (const base of ["https://api.example.org/public", "http://localhost:9999"]) {
    const { document, config } = await servedDocument({ PUBLIC_BASE_URL: base });
    assert.equal(config.baseUrl, base);
    const servers = document.servers as Array<{ url: string }>;
    assert.equal(servers[0]!.url, base);
  }
});

/** Every schema-like node that lists `required` property names, with its JSON pointer. */
function requiredLists(value: unknown, at = ""): Array<[string, Json]> {
  if (typeof value !== "object" || value === null) return [];
  const found: Array<[string, Json]> = [];
  const node = value as Json;
  if (Array.isArray(node.required)) found.push([at, node]);
  for (const [key, child] of Object.entries(node)) {
    found.push(...requiredLists(child, `${at}/${key}`));
  }
  return found;
}

// What Redocly's `recommended` ruleset and Spectral's `spectral:oas` warned about (issue 9); the CLIs
// themselves run against the served document in .ci/run.
Deno.test("the served document meets the linters: licence, operation descriptions, defined required properties, a public server", async () => {
  const publicBase = "https://discovery.legal-intelligence.test";
  const { document } = await servedDocument({ PUBLIC_BASE_URL: publicBase });
  const license = objectAt(document, "info", "license");
  assert.ok(typeof license.name === "string" && license.name !== "", "info.license.name");
  assert.ok(
    typeof license.url === "string" || typeof license.identifier === "string",
    "info.license has a url or an SPDX identifier (Redocly info-license-strict)",
  );
  const undescribed = operations(document)
    .filter(([, , operation]) =>
      typeof operation.description !== "string" || !operation.description
    )
    .map(([path, method]) => `${method.toUpperCase()} ${path}`);
  assert.deepEqual(
    undescribed,
    [],
    "every operation has a description (Spectral operation-description)",
  );
  const undefinedRequired = requiredLists(document).flatMap(([at, node]) =>
    (node.required as unknown[]).filter((name) =>
      typeof name === "string" && !(name in ((node.properties ?? {}) as Json))
    ).map((name) => `${at}: ${String(name)}`)
  );
  assert.deepEqual(
    undefinedRequired,
    [],
    "every required property is defined (Redocly no-required-schema-properties-undefined)",
  );
  const servers = (document as unknown as { servers: Array<{ url: string }> }).servers;
  assert.deepEqual(servers.map((server) => server.url), [publicBase]);
});

Deno.test("every path of the route table is described with GET, HEAD and OPTIONS, and nothing more", async () => {
  await using server = await startServer();
  const response = await rawRequest(server.url, "/openapi.json");
  const document = JSON.parse(new TextDecoder().decode(response.body)) as OpenApiDocument;
  const routes = [...buildAnswers(server.config, testContent(server.config)).paths.keys()].sort();
  assert.deepEqual(Object.keys(document.paths).sort(), routes);
  for (const path of routes) {
    const methods = HTTP_METHODS.filter((m) => document.paths[path]![m] !== undefined);
    assert.deepEqual(methods, ["get", "head", "options"], path);
  }
});

Deno.test("every error code is in the Error schema's enum, with its status on every GET", async () => {
  const { document, config } = await servedDocument();
  const error = objectAt(document, "components", "schemas", "Error");
  const code = objectAt(error, "properties", "error", "properties", "code");
  assert.deepEqual(code.enum, [...ERROR_CODES]);
  for (const expected of ["not_found", "method_not_allowed", "rate_limited", "internal_error"]) {
    assert.ok((code.enum as string[]).includes(expected), expected);
  }
  const catalog = errorCatalog(config);
  for (const [path, method, operation] of operations(document)) {
    if (method !== "get") continue;
    for (const errorCode of ERROR_CODES) {
      const status = String(catalog[errorCode].status);
      const response = deref(document, objectAt(operation, "responses", status));
      const json = objectAt(response, "content", "application/json", "schema");
      assert.deepEqual(json, { $ref: "#/components/schemas/Error" }, `${path} ${status}`);
    }
  }
});

Deno.test("RateLimit fields, Retry-After, Link, Deprecation and Sunset are described in components", async () => {
  const { document } = await servedDocument();
  const headers = objectAt(document, "components", "headers");
  const byField: Record<string, string> = {
    "RateLimit-Policy": "RateLimitPolicy",
    "RateLimit": "RateLimit",
    "RateLimit-Limit": "RateLimitLimit",
    "RateLimit-Remaining": "RateLimitRemaining",
    "RateLimit-Reset": "RateLimitReset",
    "Retry-After": "RetryAfter",
    "Link": "Link",
    "Deprecation": "Deprecation",
    "Sunset": "Sunset",
  };
  for (const [field, component] of Object.entries(byField)) {
    const header = objectAt(headers, component);
    assert.equal(typeof header.description, "string", `${field} is explained`);
    assert.ok(typeof header.schema === "object", `${field} has a schema`);
  }
  const ref = (component: string) => ({ $ref: `#/components/headers/${component}` });
  const rateFields = Object.keys(byField).filter((f) => f.startsWith("RateLimit"));
  for (const [path, method, operation] of operations(document)) {
    for (const [status, raw] of Object.entries(objectAt(operation, "responses"))) {
      const response = deref(document, raw);
      const fields = objectAt(response, "headers");
      for (const field of rateFields) {
        assert.deepEqual(
          fields[field],
          ref(byField[field]!),
          `${method} ${path} ${status} ${field}`,
        );
        assert.equal(deref(document, fields[field]).required, true, `${field} is required`);
      }
      if (status === "429") {
        assert.deepEqual(fields["Retry-After"], ref("RetryAfter"), `${method} ${path} 429`);
        assert.equal(objectAt(headers, "RetryAfter").required, true);
      }
      if (path === "/api/v1/platform") {
        for (const field of ["Link", "Deprecation", "Sunset"]) {
          assert.deepEqual(fields[field], ref(field), `${method} ${path} ${status} ${field}`);
        }
      }
    }
  }
});

// ---------------------------------------------------------------------------------------------------
// The contract check itself

/** A copy of a response with some fields changed. */
function altered(
  response: RawResponse,
  changes: { body?: string; set?: Record<string, string>; remove?: string[]; status?: number },
): RawResponse {
  const headers = new Headers(response.headers);
  for (const [name, value] of Object.entries(changes.set ?? {})) headers.set(name, value);
  for (const name of changes.remove ?? []) headers.delete(name);
  return {
    status: changes.status ?? response.status,
    headers,
    body: changes.body === undefined ? response.body : new TextEncoder().encode(changes.body),
  };
}

Deno.test("the contract check accepts real responses and rejects each kind of drift", async () => {
  await using server = await startServer({ env: { RATE_LIMIT: "100" } });
  const served = await rawRequest(server.url, "/openapi.json");
  const contract = createContract(JSON.parse(new TextDecoder().decode(served.body)));
  const platform = await rawRequest(server.url, "/api/v1/platform", {
    headers: { "accept-encoding": "br" },
  });
  const identity = await rawRequest(server.url, "/api/v1/platform");
  const notFound = await rawRequest(server.url, "/nope");
  const head = await rawRequest(server.url, "/api/v1/platform", { method: "HEAD" });

  const json = contract.check("/api/v1/platform", "GET", platform).json as Json;
  assert.equal(json.openapi, `${server.config.baseUrl}/openapi.json`, "br bodies are decoded");
  contract.check("/nope", "GET", notFound);
  contract.check("/api/v1/platform", "HEAD", head);

  const platformJson = JSON.parse(new TextDecoder().decode(identity.body)) as Json;
  const drifts: Array<[string, string, string, RawResponse, RegExp]> = [
    [
      "a Platform without a field",
      "/api/v1/platform",
      "GET",
      altered(identity, { body: JSON.stringify({ ...platformJson, support: undefined }) }),
      /breaks its schema/,
    ],
    [
      "a Platform with a field that is not a URI",
      "/api/v1/platform",
      "GET",
      altered(identity, { body: JSON.stringify({ ...platformJson, openapi: "not a uri" }) }),
      /breaks its schema/,
    ],
    [
      "an Error with an unknown code",
      "/nope",
      "GET",
      altered(notFound, {
        body: JSON.stringify({ error: { code: "gone", message: "m", hint: "h" } }),
      }),
      /breaks its schema/,
    ],
    [
      "a missing required header",
      "/api/v1/platform",
      "GET",
      altered(identity, { remove: ["ratelimit-remaining"] }),
      /requires header RateLimit-Remaining/,
    ],
    [
      "a header that breaks its schema",
      "/api/v1/platform",
      "GET",
      altered(identity, { set: { "ratelimit-remaining": "-1" } }),
      /header RateLimit-Remaining/,
    ],
    [
      "an undocumented status",
      "/api/v1/platform",
      "GET",
      altered(identity, { status: 418 }),
      /no response for status 418/,
    ],
    [
      "an undocumented media type",
      "/api/v1/platform",
      "GET",
      altered(identity, { set: { "content-type": "text/csv" } }),
      /no media type text\/csv/,
    ],
    [
      "an unlisted path answering 200",
      "/api/v1/platform/",
      "GET",
      identity,
      /does not list this path/,
    ],
    [
      "a listed path answering an unlisted method with 200",
      "/api/v1/platform",
      "POST",
      identity,
      /no post operation/,
    ],
    [
      "a HEAD response with a body",
      "/api/v1/platform",
      "HEAD",
      altered(head, { body: "{}" }),
      /a body was sent/,
    ],
    [
      "a body that is not JSON",
      "/api/v1/platform",
      "GET",
      altered(identity, { body: "{", set: { "content-length": "1" } }),
      /is not JSON/,
    ],
    [
      "a body in a coding it does not have",
      "/api/v1/platform",
      "GET",
      altered(identity, { set: { "content-encoding": "gzip" } }),
      /incorrect header check|unexpected end|invalid/i,
    ],
  ];
  for (const [what, path, method, response, message] of drifts) {
    assert.throws(() => contract.check(path, method, response), message, what);
  }
});
