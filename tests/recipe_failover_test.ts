/**
 * The VM recipe as shipped when an instance fails under load (issue 54): two service processes as
 * deploy/discovery@.service starts them (`tests/_recipe.ts`) behind real nginx from
 * deploy/nginx.conf, and 16 keep-alive clients, each from a loopback address of its own. One
 * instance hung (SIGSTOP) costs each client one non-200 at most, every request started from half the
 * hang on is answered 200 by the other instance, nginx stops sending requests to the hung one after
 * its first read timeout (but a probe per `fail_timeout`) and sends them back once it answers again;
 * an instance SIGKILLed and started again, and a rolling restart (deploy/README.md's loop), cost no
 * request at all.
 *
 * The operator's `/etc/discovery/env` raises the limit (`RATE_LIMIT`), so that every answer of a
 * healthy instance is a 200 and any other status is a failure of the recipe.
 *
 * @module
 */

import assert from "node:assert/strict";
import { hangFindings, hangUnderLoad } from "./_hang.ts";
import {
  AnswerCounter,
  connectFrom,
  getHead,
  keepAliveLoad,
  type LoadOutcome,
} from "./_keep_alive_load.ts";
import { hangTimeouts, noNginx, startNginx, type TestNginx } from "./_nginx.ts";
import { restartInstance, startInstance, warmedUp } from "./_recipe.ts";
import { freePort } from "./_redis.ts";
import type { ServiceProcess } from "./_service_process.ts";

/** Keep-alive clients, each from its own address: issue 54's check. */
const CLIENTS = 16;
/** The operator's file: a limit no client of the load reaches, so that every answer is a 200. */
const OPERATOR_ENV = { RATE_LIMIT: "1000000" };
/**
 * How long the instance hangs here: issue 54's 30 s scaled to 8 s, and with it the point from which
 * every request must be answered 200 (15 s into 30, so 4 s into 8). 8 s leaves room for nginx's read
 * timeout (2 s) to pass and for requests to start well after it; a full 30 s is too slow for the
 * suite, and `deno task bench:hang` runs it (tests/bench/hang.ts).
 */
const HANG_MS = 8_000;
/** Answers the load gets before the hang, before each kill and after each restart. */
const ANSWERS_PER_STEP = 200;
/**
 * Each client's pause between an answer and its next request: 16 clients still keep both instances
 * busy, and the 2 cores that CI shares with other suites keep some room.
 */
const PAUSE_MS = 5;
const TIMEOUTS = hangTimeouts();

/** The load's clients' addresses: 127.0.54.1 to 127.0.54.16. */
const ADDRESSES = Array.from({ length: CLIENTS }, (_, i) => `127.0.54.${i + 1}`);

/** Runs the load through `nginx` around `action`, with {@linkcode ANSWERS_PER_STEP} answers before. */
async function underLoad(
  nginx: TestNginx,
  action: (answers: AnswerCounter) => Promise<void>,
): Promise<LoadOutcome> {
  const { promise: done, resolve: finish } = Promise.withResolvers<void>();
  const answers = new AnswerCounter();
  const load = keepAliveLoad({
    port: nginx.port,
    connections: CLIENTS,
    until: done,
    request: () => getHead("/api/v1/platform"),
    reconnect: true,
    onAnswered: answers.onAnswered,
    connect: (worker) => connectFrom(nginx.port, ADDRESSES[worker]!),
    pauseMs: PAUSE_MS,
  });
  try {
    await answers.after(ANSWERS_PER_STEP);
    await action(answers);
  } finally {
    finish();
  }
  return await load;
}

/** Stops `instances[index]` with `signal`, starts it again and waits for a direct 200. */
async function restart(
  instances: ServiceProcess[],
  index: number,
  port: number,
  stateDir: string,
  signal: "SIGTERM" | "SIGKILL",
): Promise<number> {
  const { code, status } = await restartInstance(
    instances,
    index,
    signal,
    () => startInstance(port, stateDir, { env: OPERATOR_ENV }),
  );
  assert.equal(status, 200);
  return code;
}

/**
 * What nginx's error log says when an instance closed its connection after the head of an answer
 * and before its body: nginx had passed the head on to the client, and cannot try another instance.
 */
const CUT_MID_ANSWER = /upstream prematurely closed connection while reading upstream/;

/**
 * Every request of the load answered 200, none refused, and none lost but those `cut` mid-answer
 * by the instance itself (0 unless a step expects some).
 */
function assertAll200(outcome: LoadOutcome, nginx: TestNginx, cut = 0): void {
  assert.deepEqual(
    {
      lost: Math.min(outcome.lost, cut),
      refused: outcome.refused,
      statuses: [...outcome.answered.keys()],
    },
    { lost: outcome.lost, refused: 0, statuses: [200] },
    `${outcome.lost} lost, ${cut} cut mid-answer; nginx's error log:\n${nginx.errorLog()}`,
  );
}

Deno.test({
  name:
    `the VM recipe as shipped, 16 keep-alive clients: a hung instance costs each at most one non-200 and is routed around until it answers; a SIGKILL and a rolling restart cost nothing${
      noNginx ? ` (ignored: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn(t) {
    const stateDir = Deno.makeTempDirSync();
    const ports: [number, number] = [freePort(), freePort()];
    const instances: ServiceProcess[] = [];
    let nginx: TestNginx | undefined;
    try {
      for (const port of ports) {
        instances.push(await startInstance(port, stateDir, { env: OPERATOR_ENV }));
      }
      // A hang of an instance at work: its start-up's warm-up (which holds its event loop for up
      // to seconds where the token ranks' file was not built) is over.
      for (const instance of instances) await warmedUp(instance);
      nginx = await startNginx(ports, { accessLog: true });
      const proxy = nginx;

      await t.step(`one instance SIGSTOPped ${HANG_MS / 1000} s`, async () => {
        const failTimeoutMs = TIMEOUTS.failTimeoutMs;
        assert.ok(failTimeoutMs !== undefined, "the instances have max_fails and fail_timeout");
        const run = await hangUnderLoad({
          nginx: proxy,
          hung: { port: ports[0], kill: (signal) => instances[0]!.kill(signal) },
          hangMs: HANG_MS,
          clients: CLIENTS,
          answersBefore: ANSWERS_PER_STEP,
          // nginx tries it again once fail_timeout has passed since its last failure (nginx's
          // clock counts whole seconds), then at the next request it routes there.
          returnWithinMs: failTimeoutMs + 3000,
          pauseMs: PAUSE_MS,
        });
        const found = hangFindings(run, {
          lateFromMs: HANG_MS / 2,
          readTimeoutMs: TIMEOUTS.readTimeoutMs,
        });
        const said = `${JSON.stringify(found)}\nnginx's error log:\n${proxy.errorLog()}`;
        // The hang concerned some of the clients (nginx hashed them to the instance stopped).
        assert.ok(found.hungCallers >= 1, said);
        // One non-200 per client at most: a request in flight when the instance stopped is
        // answered 200 by the other after a read timeout, unless the instance had begun to write
        // its answer (nginx had passed the head on, and cannot try again): it is cut (lost).
        assert.ok(found.mostNon200OfAClient <= 1, said);
        // Every client was answered in the second half of the hang, every answer a 200.
        assert.equal(found.late.clients, CLIENTS, said);
        assert.equal(found.late.non200, 0, said);
        // Routed around: once the first requests to it timed out, nginx sent it at most one
        // request (a probe) per fail_timeout; with max_fails=0 it sent every one of its callers'.
        assert.ok(
          found.sentToHungAfterFirstTimeout <= Math.ceil(HANG_MS / failTimeoutMs),
          said,
        );
        // And back: the resumed instance answers its callers again.
        assert.ok(found.returnedAfterMs !== undefined, said);
      });

      await t.step(
        "each instance SIGKILLed in turn and started again: no error",
        async () => {
          const exits: number[] = [];
          const cutBefore = proxy.errorLogCount(CUT_MID_ANSWER);
          const outcome = await underLoad(proxy, async (answers) => {
            for (const index of [0, 1]) {
              exits.push(await restart(instances, index, ports[index]!, stateDir, "SIGKILL"));
              await answers.after(ANSWERS_PER_STEP);
            }
          });
          // 128 + 9: killed by SIGKILL.
          assert.deepEqual(exits, [137, 137]);
          // Every request nginx could place was answered 200 by an instance. Deno.serve (2.9.6)
          // writes an answer's head and its body in two writes, a bytes body too: an answer killed
          // between them is cut, and nginx, which had passed the head on, cannot retry it (about
          // once in 8 kills under this load; Node writes both at once).
          assertAll200(outcome, proxy, proxy.errorLogCount(CUT_MID_ANSWER) - cutBefore);
        },
      );

      await t.step("a rolling restart (deploy/README.md): no request lost", async () => {
        const exits: number[] = [];
        const outcome = await underLoad(proxy, async (answers) => {
          // The loop as written: the next instance stops the moment the restarted one answers.
          for (const index of [0, 1]) {
            exits.push(await restart(instances, index, ports[index]!, stateDir, "SIGTERM"));
          }
          await answers.after(ANSWERS_PER_STEP);
        });
        assert.deepEqual(exits, [0, 0]);
        assertAll200(outcome, proxy);
      });
    } finally {
      // hangUnderLoad resumes the instance it stopped, whatever happened; stop() ends them all.
      await nginx?.stop();
      for (const instance of instances) await instance.stop();
      Deno.removeSync(stateDir, { recursive: true });
    }
  },
});
