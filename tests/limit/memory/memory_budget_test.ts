/**
 * The memory budgets an operator installs follow the formula of the sizing section of
 * lib/limit/README.md: Deno Deploy's `deploy.runtime.memoryLimit` in deno.json and the systemd
 * unit's `MemoryMax=` hold the peak at the default cap and limit with every caller at the limit, on
 * the memory store and on a shared store in `exact`, and the start-up's peak, with no more than a
 * quarter to spare.
 *
 * @module
 */

import assert from "node:assert/strict";
import denoJson from "../../../deno.json" with { type: "json" };
import { DEFAULT_MAX_CALLERS } from "../../../lib/limit/memory/memory_store.ts";
import { loadConfig } from "../../../lib/config/config.ts";
import { recordEnv } from "../../../lib/config/env.ts";

const MIB = 1024 * 1024;
/** The start-up's peak: the warm-up's tokenizer worker (`deno task bench:spray`). */
const START_BYTES = 160 * MIB;
/** The service itself under load after its warm-up: the spray's peak less the store. */
const SERVICE_BYTES = 85 * MIB;
/** What a shared store in `exact` adds under the spray, whatever the callers. */
const EXACT_BYTES = 105 * MIB;

/** The formula: the peak RSS for `callers` tracked at once with `requests` each, under `cap`. */
function peakBytes(cap: number, callers: number, requests: number): number {
  let slots = 1;
  while (slots < 2 * cap) slots *= 2;
  let ring = 0;
  if (requests > 1) { for (ring = 4; ring < requests; ring *= 2); }
  const perCaller = 34 + (ring === 0 ? 0 : 8 * (2 * ring - 4));
  return Math.max(START_BYTES, SERVICE_BYTES + 4 * slots + callers * perCaller);
}

Deno.test("deno.json's memoryLimit and the unit's MemoryMax= hold the formula's peak at the default cap and limit, and the start-up's", async () => {
  const result = loadConfig(recordEnv({}));
  assert.ok(result.ok);
  const { config } = result;
  assert.equal(config.rateLimitMaxCallers, DEFAULT_MAX_CALLERS);
  const peak = peakBytes(DEFAULT_MAX_CALLERS, DEFAULT_MAX_CALLERS, config.rateLimit);
  // A shared store in `exact` keeps nothing per caller here: the service and its old generation.
  assert.ok(Math.max(START_BYTES, SERVICE_BYTES + EXACT_BYTES) < peak);
  const deploy = denoJson.deploy.runtime.memoryLimit * 1_000_000; // MB, as Deno Deploy reads it
  const unit = await Deno.readTextFile(
    new URL("../../../deploy/discovery@.service", import.meta.url),
  );
  const max = /^MemoryMax=(\d+)M$/m.exec(unit);
  assert.ok(max, "deploy/discovery@.service sets MemoryMax= in M (MiB)");
  const budgets: Array<[string, number]> = [["memoryLimit", deploy], [
    "MemoryMax",
    Number(max[1]) * MIB,
  ]];
  for (const [name, bytes] of budgets) {
    assert.ok(bytes >= peak, `${name} ${bytes} B is below the peak ${peak} B`);
    assert.ok(bytes <= peak * 1.25, `${name} ${bytes} B is far above the peak ${peak} B`);
  }
});
