/**
 * One instance of the VM recipe hung under load, through real nginx (issue 54): keep-alive clients,
 * each from a loopback address of its own (nginx hashes each address to an instance and names it to
 * the service), while one instance is stopped (SIGSTOP: it still accepts connections, as the kernel
 * does for it, and answers nothing: a stuck event loop, a log write that never returns) and then
 * resumed (SIGCONT). Every request is recorded with when it started and what it got, and nginx's
 * access log says which instances it tried. `tests/recipe_test.ts` runs it scaled down;
 * `tests/bench/hang.ts` runs it for 30 s.
 *
 * @module
 */

import {
  AnswerCounter,
  connectFrom,
  getHead,
  keepAliveLoad,
  type LoadRequest,
} from "./_keep_alive_load.ts";
import type { Handled, TestNginx } from "./_nginx.ts";

/** How often the load looks in nginx's access log for the resumed instance's first answer. */
const RETURN_POLL_MS = 100;
/**
 * How often the access log is read while the load runs: the clients share this process, so a read
 * of the whole log at once (a hundred thousand lines in 30 s) held them for a second.
 */
const LOG_READ_MS = 500;

/** Options of {@linkcode hangUnderLoad}. */
export interface HangOptions {
  /** nginx in front of the instances, started with `accessLog`. */
  nginx: TestNginx;
  /** The instance to stop: its port and a way to signal its process. */
  hung: { port: number; kill(signal: Deno.Signal): void };
  /** How long it stays stopped, in ms. */
  hangMs: number;
  /** Keep-alive clients, each from its own address (127.0.54.1, 127.0.54.2...). */
  clients: number;
  /** Answers the load gets before the stop: it is under way. */
  answersBefore: number;
  /** How long the load may wait, once the instance resumes, for nginx to send it a request again. */
  returnWithinMs: number;
  /** Each client's pause between an answer and its next request, in ms. */
  pauseMs?: number;
}

/** A request of the load, with its client's address. */
export interface ClientRequest extends LoadRequest {
  /** The client's address. */
  client: string;
}

/** What {@linkcode hangUnderLoad} saw. */
export interface HangRun {
  /** When the instance was stopped (SIGSTOP), in ms since the epoch. */
  stoppedAt: number;
  /** When it was resumed (SIGCONT), in ms since the epoch. */
  resumedAt: number;
  /** When nginx first had the resumed instance answer a request again (undefined: not in time). */
  returnedAt: number | undefined;
  /** The hung instance as nginx's access log names it (`127.0.0.1:<port>`). */
  hungUpstream: string;
  /** Every request of the load. */
  requests: ClientRequest[];
  /** nginx's record of every request. */
  handled: Handled[];
}

/** The epoch in ms, to the fraction, on the clock nginx's access log uses. */
function now(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * Runs the load, stops the instance for `hangMs`, resumes it, and runs on until nginx sends a
 * request to it again (at most `returnWithinMs`). The instance is resumed whatever happens.
 */
export async function hangUnderLoad(options: HangOptions): Promise<HangRun> {
  const { nginx, hung } = options;
  const addresses = Array.from({ length: options.clients }, (_, i) => `127.0.54.${i + 1}`);
  const requests: ClientRequest[] = [];
  const answers = new AnswerCounter();
  const { promise: done, resolve: finish } = Promise.withResolvers<void>();
  const load = keepAliveLoad({
    port: nginx.port,
    connections: options.clients,
    until: done,
    request: () => getHead("/api/v1/platform"),
    reconnect: true,
    onAnswered: answers.onAnswered,
    onRequest: (request) => requests.push({ ...request, client: addresses[request.worker]! }),
    connect: (worker) => connectFrom(nginx.port, addresses[worker]!),
    ...options.pauseMs === undefined ? {} : { pauseMs: options.pauseMs },
  });
  const hungUpstream = `127.0.0.1:${hung.port}`;
  let stoppedAt = NaN;
  let resumedAt = NaN;
  let returnedAt: number | undefined;
  const reading = setInterval(() => nginx.handled(), LOG_READ_MS);
  try {
    await answers.after(options.answersBefore);
    stoppedAt = now();
    hung.kill("SIGSTOP");
    try {
      // The hang is a length of time: nothing to wait for but the clock.
      await new Promise((resolve) => setTimeout(resolve, options.hangMs));
    } finally {
      hung.kill("SIGCONT");
      resumedAt = now();
    }
    returnedAt = await answeredAgain(nginx, hungUpstream, resumedAt, options.returnWithinMs);
  } finally {
    clearInterval(reading);
    finish();
    await load;
  }
  return { stoppedAt, resumedAt, returnedAt, hungUpstream, requests, handled: nginx.handled() };
}

/**
 * When nginx's access log first shows `upstream` answering a request started after `since` at its
 * first try, looking every {@linkcode RETURN_POLL_MS} for at most `withinMs`; undefined if not.
 */
async function answeredAgain(
  nginx: TestNginx,
  upstream: string,
  since: number,
  withinMs: number,
): Promise<number | undefined> {
  const deadline = now() + withinMs;
  let seen = 0;
  while (now() < deadline) {
    const handled = nginx.handled();
    const back = handled.slice(seen).find((request) =>
      request.startedAt >= since && request.status === 200 && request.upstream === upstream
    );
    if (back) return back.startedAt + back.ms;
    seen = handled.length;
    await new Promise((resolve) => setTimeout(resolve, RETURN_POLL_MS));
  }
  return undefined;
}

/** What a {@linkcode HangRun} cost its clients, in the terms of issue 54. */
export interface HangFindings {
  /** Requests of the load, answered or lost. */
  requests: number;
  /** Each status's count, `lost` for a request whose connection ended unanswered. */
  statuses: Record<string, number>;
  /** The most non-200 answers (lost included) one client got. */
  mostNon200OfAClient: number;
  /** Requests started from `lateFromMs` into the hang until it ended, and how many of them were not 200. */
  late: { requests: number; non200: number; clients: number };
  /** Clients nginx sent to the instance that hung, before the hang (its callers). */
  hungCallers: number;
  /**
   * Requests nginx sent to the hung instance that started once a read timeout (and the second of
   * nginx's clock) had passed since the stop: after the hang was first seen, until the resume.
   */
  sentToHungAfterFirstTimeout: number;
  /**
   * Requests the hang met (in flight when it began, or started before it ended) that took at least
   * half the read timeout.
   */
  slow: number;
  /** The longest of the requests the hang met, in ms. */
  slowestMs: number;
  /** From the resume until nginx had the instance answer again, in ms (undefined: not in time). */
  returnedAfterMs: number | undefined;
}

/** What `run` cost its clients, with the late requests from `lateFromMs` into the hang. */
export function hangFindings(
  run: HangRun,
  options: { lateFromMs: number; readTimeoutMs: number },
): HangFindings {
  const { stoppedAt, resumedAt } = run;
  const statuses: Record<string, number> = {};
  const non200 = new Map<string, number>();
  for (const request of run.requests) {
    const status = String(request.status ?? "lost");
    statuses[status] = (statuses[status] ?? 0) + 1;
    if (request.status !== 200) non200.set(request.client, (non200.get(request.client) ?? 0) + 1);
  }
  const late = run.requests.filter((r) =>
    r.startedAt >= stoppedAt + options.lateFromMs && r.startedAt < resumedAt
  );
  // Every request the hang met: in flight when it began, or started before it ended.
  const during = run.requests.filter((r) =>
    r.startedAt + r.ms >= stoppedAt && r.startedAt < resumedAt
  );
  const slow = during.filter((r) => r.ms >= options.readTimeoutMs / 2);
  const tried = (h: Handled) => h.upstream.split(/\s*[,:]\s+/).includes(run.hungUpstream);
  const firstTimeoutSeen = stoppedAt + options.readTimeoutMs + 1000;
  return {
    requests: run.requests.length,
    statuses,
    mostNon200OfAClient: Math.max(0, ...non200.values()),
    late: {
      requests: late.length,
      non200: late.filter((r) => r.status !== 200).length,
      clients: new Set(late.map((r) => r.client)).size,
    },
    hungCallers: new Set(
      run.handled.filter((h) => h.startedAt < stoppedAt && h.upstream === run.hungUpstream)
        .map((h) => h.client),
    ).size,
    sentToHungAfterFirstTimeout:
      run.handled.filter((h) =>
        h.startedAt >= firstTimeoutSeen && h.startedAt < resumedAt && tried(h)
      ).length,
    slow: slow.length,
    slowestMs: Math.round(Math.max(0, ...during.map((r) => r.ms))),
    returnedAfterMs: run.returnedAt === undefined
      ? undefined
      : Math.round(run.returnedAt - resumedAt),
  };
}
