/**
 * The operator controls on the Worker, on real workerd with its Durable Object (`_worker.ts`): the
 * vars `RATE_LIMIT_EXEMPT`, `RATE_LIMIT_DENY` and `RATE_LIMIT_MODE` as `tests/_controls.ts` checks
 * them everywhere, the caller named by `CF-Connecting-IP`; and a list refused at start answers 500
 * (a Worker cannot refuse to start).
 *
 * @module
 */

import assert from "node:assert/strict";
import { checkControls, checkReportMode, CONTROLS_ENV } from "../_controls.ts";
import { TEST_BASE_URL } from "../_server.ts";
import { startWorker } from "./_worker.ts";

const ENV = { PUBLIC_BASE_URL: TEST_BASE_URL, ACCESS_LOG: "false" } as const;
const as = (address: string) => ({ "cf-connecting-ip": address });

Deno.test("the Worker on workerd: an exempt caller 200 of 200, an ordinary one 60 of 100, a denied one 403 forbidden", async () => {
  await using worker = await startWorker({ ...ENV, ...CONTROLS_ENV });
  await checkControls(worker.url, as);
});

Deno.test("the Worker on workerd with RATE_LIMIT_MODE=report: 100 requests all 200, the last 40 with r=0", async () => {
  await using worker = await startWorker({ ...ENV, RATE_LIMIT_MODE: "report" });
  await checkReportMode(worker.url, as);
});

Deno.test("the Worker on workerd with RATE_LIMIT_EXEMPT=2001:db8::1/128 answers 500 internal_error: the list is refused", async () => {
  await using worker = await startWorker({ ...ENV, RATE_LIMIT_EXEMPT: "2001:db8::1/128" });
  const response = await fetch(`${worker.url}/api/v1/platform`, { headers: as("192.0.2.1") });
  assert.equal(response.status, 500);
  assert.equal((await response.json()).error.code, "internal_error");
});
