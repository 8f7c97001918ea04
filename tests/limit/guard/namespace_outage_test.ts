/**
 * A namespace outage of a store of many objects (`GuardedStore` with `failureScope` and canaries, as
 * the Durable Object store opens it), in process: with one caller or a thousand, every object
 * throwing or stalling, it is known within two store timeouts of the first failed call (beyond what
 * as many requests take healthy): one incident, the breaker's state `open`, no object called
 * meanwhile but the canaries once a probe interval, and it ends when a canary answers again.
 *
 * A latency bound on a shared event loop: it runs in `deno task test`'s second pass, alone (beside
 * other files a loaded machine once held a thousand stalled calls' loop past it).
 *
 * The real store on workerd: `tests/workers/failing_objects_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { MAX_CALLER_NOTICES } from "../../../lib/limit/guard/caller_notices.ts";
import { MAX_EXTENSIONS } from "../../../lib/limit/guard/guarded_store.ts";
import { fields, NOW, objectsGuard, OVERLOADED, TIMEOUT_MS } from "./_objects.ts";

for (const callers of [1, 1000]) {
  for (const fault of ["overloaded", "stall"] as const) {
    for (const onError of ["open", "closed"] as const) {
      Deno.test(
        `a namespace outage (every object ${fault}), ${callers} caller${
          callers > 1 ? "s" : ""
        }, ${onError}: one incident and the breaker open within two store timeouts of the first failed call; no object called until the canaries answer again`,
        async () => {
          const { objects, guard, incidents, reported, notices, advance } = objectsGuard(onError);
          // What as many requests at once take here without an outage (this machine is shared).
          const healthy = performance.now();
          await Promise.all(
            Array.from({ length: callers }, (_, i) => guard.hit(`10.1.${i >> 8}.${i & 255}`, NOW)),
          );
          const baseline = performance.now() - healthy;
          objects.down = fault;
          const keys = Array.from({ length: callers }, (_, i) => `10.0.${i >> 8}.${i & 255}`);
          const started = performance.now();
          await Promise.all(keys.map((key) => guard.hit(key, NOW)));
          const detectedMs = reported[0]! - started;
          // deno-lint-ignore no-console
          console.log(
            `${fault} ${onError} ${callers}: the outage known after ${detectedMs.toFixed(0)} ms (${
              baseline.toFixed(0)
            } ms for as many requests, healthy)`,
          );
          assert.equal(incidents.length, 1, JSON.stringify(incidents));
          assert.deepEqual(incidents[0], {
            kind: "unavailable",
            policy: onError,
            error: fault === "overloaded"
              ? `Error: ${OVERLOADED}`
              : `StoreTimeoutError: rate-limit store did not answer within ${TIMEOUT_MS} ms`,
          });
          assert.equal(guard.breakerState, "open");
          assert.equal(guard.healthy, false);
          // Within what the wave takes anyway, plus two timeouts (the caller's call, then the
          // canaries at once), each extended at most MAX_EXTENSIONS times while the loop is busy.
          const bound = baseline + 2 * (1 + MAX_EXTENSIONS) * TIMEOUT_MS;
          assert.ok(detectedMs < bound, `detected after ${detectedMs} ms, over ${bound} ms`);
          // Callers that failed while the canaries were asked: named ten at most.
          assert.ok(
            notices.length <= Math.min(callers - 1, MAX_CALLER_NOTICES),
            `${notices.length}`,
          );
          const calls = objects.callsOf("10.0.");
          const canaries = objects.callsOf("canary:");
          // Down: answered at once by the policy, no object called, the incident said once.
          for (let i = 0; i < 3; i++) {
            const answers = await Promise.all(keys.map((key) => guard.hit(key, NOW)));
            assert.ok(answers.every((decision) => guard.failureAnswer(decision) === onError));
          }
          assert.equal(objects.callsOf("10.0."), calls);
          assert.equal(objects.callsOf("canary:"), canaries);
          assert.equal(incidents.length, 1);
          // A probe interval later one request asks the canaries again (still down: no new line).
          advance(1000);
          await guard.hit(keys[0]!, NOW);
          assert.equal(objects.callsOf("canary:"), canaries + 2);
          assert.equal(incidents.length, 1);
          assert.equal(guard.breakerState, "open");
          // Back: the next probe finds a canary answering, and that request is its object's answer.
          objects.down = undefined;
          advance(1000);
          const back = await guard.hit("192.0.2.200", NOW);
          assert.deepEqual(fields(back), { allowed: true, remaining: 59, resetSeconds: 60 });
          assert.equal(incidents.length, 2);
          assert.equal(incidents[1]!.kind, "recovered");
          assert.equal(guard.breakerState, "closed");
        },
      );
    }
  }
}
