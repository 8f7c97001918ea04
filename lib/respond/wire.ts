/**
 * The handler's answer before any `Response` is built ({@linkcode Answer}: the template chosen and
 * the decision whose fields it carries), and that answer as it goes on the wire
 * ({@linkcode createWire}): its status, its header fields as one flat name/value list, its body as
 * bytes kept once per template.
 *
 * The handler's `fetch` turns an answer into a `Response` (`response_cache.ts`); a runtime whose
 * server takes plain values sends the wire form instead and builds no WHATWG object per request
 * (Node's entry, `lib/node/fast_path.ts`: a `Response` and its `Headers` cost Node more than the rest
 * of a request, tests/bench/README.md, "Node"). Both forms hold the same fields in the same order
 * (the template's, the rate-limit fields, then `content-length` where there is a body, as Deno
 * sends them), and a test holds Node's bytes to Deno's (tests/node/node_wire_test.ts).
 *
 * @module
 */

import {
  appendRateLimitFields,
  type Decision,
  type RateLimitConstants,
} from "../limit/core/decision.ts";
import type { ResponseTemplate } from "./response_cache.ts";

/** What the handler answers a request with: a template and the decision whose fields it carries. */
export interface Answer {
  /** The status, body and fixed fields. */
  readonly template: ResponseTemplate;
  /** The rate-limit decision the answer reports (for a 500, the policy's undecided one). */
  readonly decision: Decision;
  /** Why a would-be refusal was served or a caller denied, for the access log; else undefined. */
  readonly outcome: string | undefined;
}

/** Answers in their wire form: what a server sends for them without building a `Response`. */
export interface Wire {
  /**
   * The answer's fields, flat (name, value, name, value...): the template's, the decision's
   * rate-limit fields, then `content-length` when the template has a body or names one (HEAD). A new array each call,
   * which the caller may extend (`connection: close` in a drain).
   */
  fields(answer: Answer): string[];
  /** The template's body as bytes, encoded once and kept with the template; `null` without one. */
  body(template: ResponseTemplate): Uint8Array | null;
}

/** What the wire keeps per template: its fields flat, its body's bytes and their length. */
interface Kept {
  readonly fields: readonly string[];
  readonly body: Uint8Array | null;
  readonly length: string | undefined;
}

const ENCODER = new TextEncoder();

/**
 * Creates the wire form of the service's answers for its policy's constant field values. What it
 * keeps per template lives in a `WeakMap` beside the template: templates are built once and kept by
 * their paths (`answers.ts`), so this adds one flat list and one byte array per template.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const wire = createWire({ policy: '"default";q=60;w=60', limit: "60" });
 * const template = { status: 200, body: "{}", fields: [["content-type", "application/json"]] } as const;
 * const answer = { template, decision: { allowed: true, remaining: 59, resetSeconds: 60 }, outcome: undefined };
 * assert.deepEqual(wire.fields(answer), [
 *   "content-type", "application/json",
 *   "ratelimit-policy", '"default";q=60;w=60', "ratelimit", '"default";r=59;t=60',
 *   "ratelimit-limit", "60", "ratelimit-remaining", "59", "ratelimit-reset", "60",
 *   "content-length", "2",
 * ]);
 * assert.deepEqual(wire.body(template), new TextEncoder().encode("{}"));
 * ```
 */
export function createWire(constants: RateLimitConstants): Wire {
  const kept = new WeakMap<ResponseTemplate, Kept>();
  // Most requests in a row are answered by one template: one comparison instead of a look-up.
  let lastTemplate: ResponseTemplate | undefined;
  let lastKept: Kept | undefined;
  const keptOf = (template: ResponseTemplate): Kept => {
    if (template === lastTemplate) return lastKept!;
    let found = kept.get(template);
    if (found === undefined) {
      const { body } = template;
      const bytes = typeof body === "string" ? ENCODER.encode(body) : body;
      // A HEAD template names its GET's length among its fields; Deno sends it last, as here.
      const named = template.fields.find(([name]) => name === "content-length")?.[1];
      found = {
        fields: template.fields.filter(([name]) => name !== "content-length").flat(),
        body: bytes,
        length: bytes === null ? named : String(bytes.length),
      };
      kept.set(template, found);
    }
    lastTemplate = template;
    lastKept = found;
    return found;
  };
  return {
    fields(answer) {
      const own = keptOf(answer.template);
      const fields = appendRateLimitFields(own.fields.slice(), answer.decision, constants);
      if (own.length !== undefined) fields.push("content-length", own.length);
      return fields;
    },
    body: (template) => keptOf(template).body,
  };
}
