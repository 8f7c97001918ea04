/**
 * Tests of a variant's templates (200, HEAD's 200, 304) and of their keeper, which builds each
 * variant's once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { buildRepresentation, enableCompression } from "../../lib/http/representation.ts";
import { createVariantSets, variantTemplates } from "../../lib/respond/variant_templates.ts";

const LONG_JSON = JSON.stringify({ items: Array.from({ length: 200 }, (_, i) => ({ i })) });

// Codings are built once compression is enabled (the warm-up enables it in the service).
enableCompression();

Deno.test("variantTemplates(): 200 with the body, HEAD with its length and no body, 304 with no body", async () => {
  const json = await buildRepresentation("application/json", LONG_JSON);
  const identity = variantTemplates(json.variants.identity);
  assert.equal(identity.ok.body, LONG_JSON);
  assert.equal(identity.head.body, null);
  assert.deepEqual(identity.head.fields.at(-1), ["content-length", String(LONG_JSON.length)]);
  assert.equal(identity.notModified.status, 304);
  assert.equal(identity.notModified.body, null);
  // A compressed body is kept as bytes, never as text.
  assert.ok(variantTemplates(json.variants.br!).ok.body instanceof Uint8Array);
});

Deno.test("createVariantSets() builds a coding's templates on first use and keeps them in the set", async () => {
  const sets = createVariantSets();
  const set = sets.setOf(await buildRepresentation("application/json", LONG_JSON));
  assert.equal(set.br, undefined);
  const br = sets.coded(set, "br");
  assert.equal(set.br, br);
  assert.notEqual(br, set.identity);
  assert.equal(sets.coded(set, "br"), br);
  // Another set of the same representation shares the built templates.
  assert.equal(sets.setOf(set.representation).identity, set.identity);
});
