/**
 * Tests of prebuilt representations: codings that round-trip, distinct strong ETags, header fields.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import {
  buildRepresentation,
  compressBytes,
  enableCompression,
  useCompressor,
} from "../../lib/http/representation.ts";
import { type DenoInfo, denoInfo } from "../_deno_info.ts";

const TEXT = "# Title\n\n" + "Some text that repeats. ".repeat(40);

// Compressed variants are built once compression is enabled (the warm-up enables it in the service);
// whether a fresh process answers identity until then is tested in cold_start_imports_test.ts.
enableCompression();

Deno.test("buildRepresentation() builds br and gzip bodies that decode to the identity body", async () => {
  const rep = await buildRepresentation("text/markdown; charset=utf-8", TEXT);
  const decoder = new TextDecoder();
  assert.equal(decoder.decode(rep.variants.identity.body), TEXT);
  assert.equal(decoder.decode(gunzipSync(rep.variants.gzip!.body)), TEXT);
  assert.equal(decoder.decode(brotliDecompressSync(rep.variants.br!.body)), TEXT);
  assert.ok(rep.variants.br!.body.length < rep.variants.identity.body.length);
});

Deno.test("compressBytes() compresses the largest body the service sends in both codings, and they decode to it", async () => {
  const openapi = await Deno.readFile(new URL("../../static/openapi.json", import.meta.url));
  const br = await compressBytes(openapi, "br");
  const gzip = await compressBytes(openapi, "gzip");
  assert.ok(br.length < openapi.length / 5, `br ${br.length} of ${openapi.length} bytes`);
  assert.ok(gzip.length < openapi.length / 5, `gzip ${gzip.length} of ${openapi.length} bytes`);
  assert.deepEqual(new Uint8Array(brotliDecompressSync(br)), openapi);
  assert.deepEqual(new Uint8Array(gunzipSync(gzip)), openapi);
});

/** Every module `root` reaches through static and dynamic imports, from `deno info --json`. */
function reachable(info: DenoInfo, root: string): string[] {
  const bySpecifier = new Map(info.modules.map((module) => [module.specifier, module]));
  const seen = new Set<string>();
  const pending = [root];
  for (let specifier = pending.pop(); specifier !== undefined; specifier = pending.pop()) {
    if (seen.has(specifier)) continue;
    seen.add(specifier);
    for (const dependency of bySpecifier.get(specifier)?.dependencies ?? []) {
      if (dependency.code !== undefined) pending.push(dependency.code.specifier);
    }
  }
  return [...seen];
}

// Node compatibility (node:zlib loads it) keeps megabytes resident for the life of the process:
// tests/bench/README.md, "The hot caller and memory".
Deno.test("representation.ts and the warm-up reach no node: module and no npm package, even dynamically", async () => {
  const info = await denoInfo();
  for (const module of ["lib/http/representation.ts", "lib/warm_up.ts"]) {
    const root = new URL(`../../${module}`, import.meta.url).href;
    assert.ok(info.modules.some((m) => m.specifier === root), `${module} is in main.ts's graph`);
    const external = reachable(info, root).filter((specifier) =>
      specifier.startsWith("node:") || specifier.startsWith("npm:")
    );
    assert.deepEqual(external, [], module);
  }
});

Deno.test("a representation built before compression is enabled has no codings until compress()", async () => {
  // A second instance of the module (its own query string), in which compression is not enabled.
  const url = new URL("../../lib/http/representation.ts?before", import.meta.url).href;
  const fresh: typeof import("../../lib/http/representation.ts") = await import(url);
  assert.equal(fresh.compressionEnabled(), false);
  const rep = await fresh.buildRepresentation("text/markdown; charset=utf-8", TEXT);
  assert.equal(rep.variants.br, undefined);
  assert.equal(rep.variants.gzip, undefined);
  await rep.compress();
  assert.equal(new TextDecoder().decode(brotliDecompressSync(rep.variants.br!.body)), TEXT);
  assert.equal(new TextDecoder().decode(gunzipSync(rep.variants.gzip!.body)), TEXT);
  assert.equal(rep.compress(), rep.compress(), "compressed once");
});

Deno.test("once compression is enabled, reading a coding of a representation built before starts its compression", async () => {
  const url = new URL("../../lib/http/representation.ts?later", import.meta.url).href;
  const fresh: typeof import("../../lib/http/representation.ts") = await import(url);
  const rep = await fresh.buildRepresentation("text/markdown; charset=utf-8", TEXT);
  fresh.enableCompression();
  assert.equal(rep.variants.br, undefined, "the read that starts it still gets the identity");
  for (let turn = 0; turn < 100 && rep.variants.gzip === undefined; turn++) {
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  const { br, gzip } = rep.variants as Partial<typeof rep.variants>;
  assert.ok(gzip !== undefined && gzip.body.length < TEXT.length);
  assert.ok(br !== undefined && br.body.length < TEXT.length);
});

Deno.test("buildRepresentation() gives each coding its own strong ETag and Content-Encoding", async () => {
  const rep = await buildRepresentation("text/plain; charset=utf-8", TEXT, {
    headers: [["vary", "Accept-Encoding"]],
  });
  const etags = new Set([
    rep.variants.identity.etag,
    rep.variants.gzip!.etag,
    rep.variants.br!.etag,
  ]);
  assert.equal(etags.size, 3);
  for (const etag of etags) assert.match(etag, /^"[A-Za-z0-9_-]+"$/);
  const fields = (encoding: "identity" | "gzip" | "br") =>
    Object.fromEntries(rep.variants[encoding]!.headers);
  assert.equal(fields("identity")["content-encoding"], undefined);
  assert.equal(fields("gzip")["content-encoding"], "gzip");
  assert.equal(fields("br")["content-encoding"], "br");
  assert.equal(fields("br")["content-type"], "text/plain; charset=utf-8");
  assert.equal(fields("br").etag, rep.variants.br!.etag);
  assert.equal(fields("br").vary, "Accept-Encoding");
  assert.equal(fields("br")["cache-control"], "no-cache");
  const notModified = Object.fromEntries(rep.variants.br!.notModifiedHeaders);
  assert.equal(notModified.etag, rep.variants.br!.etag);
  assert.equal(notModified.vary, "Accept-Encoding");
  assert.equal(notModified["content-type"], undefined);
});

Deno.test("buildRepresentation() sends a body that does not compress as identity under every coding", async () => {
  const rep = await buildRepresentation("application/json", '{"a":1}');
  assert.equal(rep.variants.gzip, rep.variants.identity);
  assert.equal(rep.variants.br, rep.variants.identity);
});

Deno.test("buildRepresentation() ETags change when the body changes", async () => {
  assert.notEqual(
    (await buildRepresentation("text/plain", "a")).variants.identity.etag,
    (await buildRepresentation("text/plain", "b")).variants.identity.etag,
  );
});

Deno.test("buildRepresentation() ETags are the body's SHA-256, the same for the same bytes", async () => {
  const etag = (await buildRepresentation("text/plain", TEXT)).variants.identity.etag;
  assert.equal(etag, (await buildRepresentation("text/markdown", TEXT)).variants.identity.etag);
  const sha256 = new Uint8Array(
    await crypto.subtle.digest("SHA-256", new TextEncoder().encode(TEXT)),
  );
  const base64url = btoa(String.fromCharCode(...sha256)).replace(/=+$/, "")
    .replaceAll("+", "-").replaceAll("/", "_");
  assert.equal(etag, `"${base64url}"`);
});

Deno.test("buildRepresentation()'s identity ETag is the SHA-256 of the body in base64url without padding", async () => {
  for (const body of [TEXT, "", "\u00ff".repeat(1_000)]) {
    const rep = await buildRepresentation("text/plain; charset=utf-8", body);
    const expected = createHash("sha256").update(body, "utf8").digest("base64url");
    assert.equal(rep.variants.identity.etag, `"${expected}"`);
  }
});

Deno.test("a coded variant's ETag names its own bytes: the SHA-256 of what it sends, and its coding", async () => {
  enableCompression();
  const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("base64url");
  const ours = await buildRepresentation("text/plain; charset=utf-8", TEXT);
  for (const coding of ["br", "gzip"] as const) {
    const variant = ours.variants[coding]!;
    assert.equal(variant.etag, `"${sha256(variant.body)}-${coding}"`, coding);
  }
  // Another compressor (Node's entry uses node:zlib: lib/node/compress.ts) sends other bytes for
  // the same body: they get another tag, and the identity variant keeps its own.
  try {
    // Not a real coding: bytes other than the runtime's, shorter than the body, which is all a
    // coding must be to be used.
    useCompressor((bytes) => Promise.resolve(new Uint8Array(bytes.subarray(0, bytes.length - 1))));
    const other = await buildRepresentation("text/plain; charset=utf-8", TEXT);
    assert.equal(other.variants.identity.etag, ours.variants.identity.etag);
    for (const coding of ["br", "gzip"] as const) {
      const variant = other.variants[coding]!;
      assert.notDeepEqual(variant.body, ours.variants[coding]!.body);
      assert.equal(variant.etag, `"${sha256(variant.body)}-${coding}"`, coding);
      assert.notEqual(variant.etag, ours.variants[coding]!.etag, coding);
    }
  } finally {
    useCompressor(compressBytes);
  }
});

Deno.test("a runtime without brotli (Workers) still gets a gzip variant: br shares identity", async () => {
  const Original = globalThis.CompressionStream;
  // Workers' CompressionStream refuses "brotli" with this message; gzip works.
  class WorkersCompressionStream extends Original {
    constructor(format: CompressionFormat) {
      if (String(format) === "brotli") {
        throw new TypeError(
          "The compression format must be either 'deflate', 'deflate-raw' or 'gzip'.",
        );
      }
      super(format);
    }
  }
  globalThis.CompressionStream = WorkersCompressionStream;
  try {
    enableCompression();
    const representation = await buildRepresentation("text/markdown; charset=utf-8", TEXT);
    const { identity, br, gzip } = representation.variants;
    assert.equal(br, identity);
    assert.ok(gzip !== undefined && gzip !== identity);
    assert.equal(gunzipSync(gzip.body).toString(), TEXT);
    assert.equal(gzip.etag, `"${createHash("sha256").update(gzip.body).digest("base64url")}-gzip"`);
  } finally {
    globalThis.CompressionStream = Original;
  }
});
