/**
 * Tests of prebuilt representations: codings that round-trip, distinct strong ETags, header fields.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import {
  brotliWindowBits,
  buildRepresentation,
  loadCompression,
} from "../../lib/http/representation.ts";

const TEXT = "# Title\n\n" + "Some text that repeats. ".repeat(40);

// Compressed variants exist once node:zlib has loaded (the warm-up loads it in the service); whether
// a fresh process answers identity until then is tested in cold_start_imports_test.ts.
await loadCompression();

Deno.test("buildRepresentation() builds br and gzip bodies that decode to the identity body", async () => {
  const rep = await buildRepresentation("text/markdown; charset=utf-8", TEXT);
  const decoder = new TextDecoder();
  assert.equal(decoder.decode(rep.variants.identity.body), TEXT);
  assert.equal(decoder.decode(gunzipSync(rep.variants.gzip!.body)), TEXT);
  assert.equal(decoder.decode(brotliDecompressSync(rep.variants.br!.body)), TEXT);
  assert.ok(rep.variants.br!.body.length < rep.variants.identity.body.length);
});

/** The window size in bits a brotli stream declares in its first bits (RFC 7932 section 9.1). */
function declaredWindowBits(stream: Uint8Array): number {
  const bits = stream[0]! | (stream[1]! << 8);
  if ((bits & 1) === 0) return 16;
  const n = (bits >> 1) & 7;
  if (n !== 0) return 17 + n;
  const m = (bits >> 4) & 7;
  return m === 0 ? 17 : 8 + m;
}

Deno.test("buildRepresentation() compresses br with a window sized to the body, not brotli's 4 MiB default", async () => {
  // The largest body the service sends (the OpenAPI document) and a small one.
  const openapi = await Deno.readFile(new URL("../../static/openapi.json", import.meta.url));
  for (const body of [openapi, new TextEncoder().encode(TEXT)]) {
    const rep = await buildRepresentation("application/json", body);
    const br = rep.variants.br!.body;
    assert.ok(2 ** declaredWindowBits(br) - 16 >= body.length, "the window holds the body");
    assert.equal(declaredWindowBits(br), brotliWindowBits(body.length));
    assert.ok(
      declaredWindowBits(br) < 22,
      `${declaredWindowBits(br)} bits for ${body.length} bytes`,
    );
    assert.deepEqual(new Uint8Array(brotliDecompressSync(br)), body);
  }
  assert.equal(brotliWindowBits(0), 10);
  assert.equal(brotliWindowBits(2 ** 18 - 16), 18);
  assert.equal(brotliWindowBits(2 ** 18 - 15), 19);
  assert.equal(brotliWindowBits(2 ** 30), 24);
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
