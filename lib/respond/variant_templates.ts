/**
 * The responses of one representation in one content coding (a variant): 200, HEAD's 200 and 304.
 *
 * A variant's templates are built once, the first time a request or the warm-up asks for its coding
 * after it has been compressed (see `representation.ts`), and kept: their identity is the response
 * cache's key. Until then a request for br or gzip gets the identity templates.
 *
 * @module
 */

import { STATUS } from "../http/message.ts";
import type { Encoding } from "../http/negotiate.ts";
import type { Representation, Variant } from "../http/representation.ts";
import { type ResponseTemplate, sendableBody } from "./response_cache.ts";

/** The responses of one variant (a representation in one coding). */
export interface VariantTemplates {
  /** The variant's entity tag, for `If-None-Match`. */
  readonly etag: string;
  /** 200 to GET. */
  readonly ok: ResponseTemplate;
  /** 200 to HEAD: no body, its `Content-Length`. */
  readonly head: ResponseTemplate;
  /** 304 to a GET or HEAD whose `If-None-Match` matches. */
  readonly notModified: ResponseTemplate;
}

/**
 * The templates of one representation per coding. A compressed coding's field is filled the first
 * time it is asked for ({@linkcode VariantSets.coded}); every later request reads the field.
 */
export interface VariantSet {
  /** The uncompressed variant (always built). */
  identity: VariantTemplates;
  /** Brotli, once asked for. */
  br: VariantTemplates | undefined;
  /** Gzip, once asked for. */
  gzip: VariantTemplates | undefined;
  /** The representation the variants are of. */
  readonly representation: Representation;
}

/** Builds and keeps variant templates: codings that do not compress share one variant's. */
export interface VariantSets {
  /** The set of a representation, with its identity variant built. */
  setOf(representation: Representation): VariantSet;
  /**
   * The templates of `set` in `encoding`, built and kept in `set` on first use; the identity
   * templates (not kept) while the coding is not compressed yet.
   */
  coded(set: VariantSet, encoding: Encoding): VariantTemplates;
}

/**
 * The templates of one variant.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { buildRepresentation } from "../http/representation.ts";
 * const json = await buildRepresentation("application/json", '{"ok":true}');
 * const templates = variantTemplates(json.variants.identity);
 * assert.equal(templates.ok.status, 200);
 * assert.equal(templates.ok.body, '{"ok":true}');
 * assert.equal(templates.head.body, null);
 * assert.equal(templates.notModified.status, 304);
 * ```
 */
export function variantTemplates(variant: Variant): VariantTemplates {
  return {
    etag: variant.etag,
    ok: {
      status: STATUS.OK,
      body: sendableBody(
        variant.body,
        variant.headers.some(([name]) => name === "content-encoding"),
      ),
      fields: variant.headers,
    },
    head: {
      status: STATUS.OK,
      body: null,
      fields: [...variant.headers, ["content-length", String(variant.body.length)]],
    },
    notModified: { status: STATUS.NotModified, body: null, fields: variant.notModifiedHeaders },
  };
}

/**
 * Creates the keeper of variant templates: each variant's are built once, however many sets or
 * codings lead to it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { buildRepresentation, enableCompression } from "../http/representation.ts";
 * enableCompression();
 * const sets = createVariantSets();
 * const set = sets.setOf(await buildRepresentation("text/plain; charset=utf-8", "hi"));
 * // Two bytes do not compress: every coding answers with the identity variant's templates.
 * assert.equal(sets.coded(set, "br"), set.identity);
 * assert.equal(set.br, set.identity);
 * ```
 */
export function createVariantSets(): VariantSets {
  const byVariant = new Map<Variant, VariantTemplates>();
  const templatesOf = (variant: Variant): VariantTemplates => {
    let built = byVariant.get(variant);
    if (built === undefined) {
      built = variantTemplates(variant);
      byVariant.set(variant, built);
    }
    return built;
  };
  return {
    setOf: (representation) => ({
      identity: templatesOf(representation.variants.identity),
      br: undefined,
      gzip: undefined,
      representation,
    }),
    coded: (set, encoding) => {
      const variant = set.representation.variants[encoding];
      return variant === undefined ? set.identity : set[encoding] = templatesOf(variant);
    },
  };
}
