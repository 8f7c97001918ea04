/**
 * What a kept response costs on Node (`node.ts` runs it with Node 24 and 26): the response cache's
 * clone of a kept `Response` (`keep: true`, Deno's choice: a clone there is cheap) against a
 * `Response` built afresh from the template (`keep: false`, the Workers' choice), each read whole as
 * the Node adapter sends it (`arrayBuffer()`), in interleaved rounds. On Node, `clone()` tees the
 * body's stream. Prints one line `CLONE {...}`: ns per response for each, and their ratio.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { createResponseCache, type ResponseTemplate } from "../../lib/respond/response_cache.ts";

const CONSTANTS = { policy: '"default";q=60;w=60', limit: "60" };
const TEMPLATE: ResponseTemplate = {
  status: 200,
  body: JSON.stringify({ name: "x".repeat(300) }),
  fields: [["content-type", "application/json"], ["etag", '"abc"'], ["vary", "Accept"]],
};
/** One decision, so the kept cache answers every request from one kept response. */
const DECISION = { allowed: true, remaining: 59, resetSeconds: 60 };
const PER_ROUND = 20_000;

async function round(keep: boolean): Promise<number> {
  const cache = createResponseCache(CONSTANTS, { keep });
  for (let i = 0; i < 1000; i++) await cache.respond(TEMPLATE, DECISION).arrayBuffer();
  const started = performance.now();
  for (let i = 0; i < PER_ROUND; i++) await cache.respond(TEMPLATE, DECISION).arrayBuffer();
  return ((performance.now() - started) * 1e6) / PER_ROUND;
}

const kept: number[] = [];
const fresh: number[] = [];
for (let i = 0; i < 5; i++) {
  kept.push(await round(true));
  fresh.push(await round(false));
}
const median = (values: number[]) => values.toSorted((a, b) => a - b)[2]!;
const ratios = kept.map((value, i) => value / fresh[i]!);
console.log(
  `CLONE ${
    JSON.stringify({
      keptNs: Math.round(median(kept)),
      freshNs: Math.round(median(fresh)),
      ratio: Number(median(ratios).toFixed(2)),
    })
  }`,
);
