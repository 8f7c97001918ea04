/**
 * The access log: one record per request, formatted as a JSON line and written to stdout in batches.
 *
 * A write per request would cost more than answering it, so lines are gathered and handed to the
 * writer together every `flushMs` or when the buffer is large; `flush` hands on what is left (at
 * shutdown). The writer is the entry's stdout (`lib/lifecycle/line_writer.ts`), which never blocks. Records are made by {@linkcode createAccessRecorder}, which the handler calls once per
 * request.
 *
 * @module
 */

import { parseIp, unmapIpv4 } from "./http/address.ts";
import { ipv4Value, NO_ADDRESS_KEY } from "./limit/caller/caller_key.ts";
import { later } from "./timer.ts";

/** One access-log record: never the query string, a body, or a full client address. */
export interface AccessRecord {
  /** ISO 8601 time the request arrived. */
  time: string;
  /** Request method. */
  method: string;
  /** Request path without query string. */
  path: string;
  /** Response status. */
  status: number;
  /** Milliseconds spent in the handler. */
  ms: number;
  /** The caller's address truncated to /24 (IPv4) or /48 (IPv6). */
  caller: string;
  /** `"invalid"` when the request was refused (400) for its `Host`; absent otherwise. */
  host?: "invalid";
  /**
   * How the operator's controls changed the answer, absent otherwise: `exempted` (a would-be 429 of
   * a `RATE_LIMIT_EXEMPT` caller, served), `report_refused` (a would-be 429 served under
   * `RATE_LIMIT_MODE=report`), `denied` (403, `RATE_LIMIT_DENY`).
   */
  ratelimit?: string;
}

/** Makes one request's record and hands it on: method, path, caller key, start time, status. */
export type AccessRecorder = (
  method: string,
  path: string,
  key: string,
  started: number,
  status: number,
  badHost?: boolean,
  ratelimit?: string,
) => void;

/**
 * Creates the recorder that turns a request's facts into an {@linkcode AccessRecord} for `log`.
 * Per request, the record needs the time as ISO 8601 and the truncated caller: both are remembered
 * from the request before, the time for its millisecond (tens of requests share one under load), the
 * caller for its key (a busy caller's requests come in a row): 7% and 16% of a hot caller's
 * throughput, paired (tests/bench/README.md, "Tried and not kept").
 *
 * @param now the clock the handler measures with, in ms
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const records: AccessRecord[] = [];
 * const record = createAccessRecorder((r) => records.push(r), () => 0);
 * record("GET", "/api/v1/platform", "192.0.2.77", 0, 200);
 * assert.deepEqual(records, [{
 *   time: "1970-01-01T00:00:00.000Z",
 *   method: "GET",
 *   path: "/api/v1/platform",
 *   status: 200,
 *   ms: 0,
 *   caller: "192.0.2.0",
 * }]);
 * ```
 */
export function createAccessRecorder(
  log: (record: AccessRecord) => void,
  now: () => number,
): AccessRecorder {
  let isoMs = Number.NaN;
  let iso = "";
  // The caller is logged as the rate limit saw it (behind trusted proxies, the client, not the
  // proxy), truncated: keys are an IPv4 address or an IPv6 /64 written as "xxxx:...::/64". Only the
  // last key is remembered: a map of keys cost more than it saved among many callers.
  let callerOf: string | undefined;
  let caller = "";
  return (method, path, key, started, status, badHost, ratelimit) => {
    if (started !== isoMs) {
      isoMs = started;
      iso = new Date(started).toISOString();
    }
    if (key !== callerOf) {
      callerOf = key;
      caller = truncatedCaller(key);
    }
    log({
      time: iso,
      method,
      path,
      status,
      ms: Math.round((now() - started) * 1000) / 1000,
      caller,
      ...(badHost ? { host: "invalid" as const } : {}),
      ...(ratelimit === undefined ? {} : { ratelimit }),
    });
  };
}

/** Options of {@linkcode createAccessLog}. */
export interface AccessLogOptions {
  /** Most milliseconds a line waits before it is written (default 250). */
  flushMs?: number;
  /** Bytes gathered before an immediate write (default 64 KiB). */
  maxBuffer?: number;
}

/** An access log: `log` one record, `flush` the rest. */
export interface AccessLog {
  /** Queues one record. */
  log: (record: AccessRecord) => void;
  /** Writes every queued line now. */
  flush: () => void;
}

/** Formats one record as a JSON line (keys in a fixed order, so lines are easy to grep). */
export function formatAccessRecord(record: AccessRecord): string {
  return `{"time":"${record.time}","method":${JSON.stringify(record.method)},"path":${
    JSON.stringify(record.path)
  },"status":${record.status},"ms":${record.ms},"caller":"${record.caller}"${
    record.host === undefined ? "" : `,"host":"${record.host}"`
  }${record.ratelimit === undefined ? "" : `,"ratelimit":"${record.ratelimit}"`}}\n`;
}

/**
 * Creates a batched access log over a writer of lines.
 *
 * @param write takes a chunk of whole lines (the entry's stdout writer), never blocking
 */
export function createAccessLog(
  write: (chunk: string) => void,
  options: AccessLogOptions = {},
): AccessLog {
  const flushMs = options.flushMs ?? 250;
  const maxBuffer = options.maxBuffer ?? 65_536;
  let buffer = "";
  let cancelTimer: (() => void) | undefined;

  const flush = () => {
    cancelTimer?.();
    cancelTimer = undefined;
    if (buffer === "") return;
    const chunk = buffer;
    buffer = "";
    write(chunk);
  };

  return {
    log(record) {
      buffer += formatAccessRecord(record);
      if (buffer.length >= maxBuffer) {
        flush();
      } else if (cancelTimer === undefined) {
        // Not setTimeout: its first use loads Node's timers, which a first response would wait for.
        cancelTimer = later(flushMs, flush);
      }
    },
    flush,
  };
}

/**
 * A caller key as the logs name it: its address truncated ({@linkcode truncatedAddress}; an IPv6
 * key is its `/64`), or the key of the callers without an address as it is. Every line that names
 * a caller (the access log, the limiter's events) names it so, never by its full address.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(truncatedCaller("192.0.2.77"), "192.0.2.0");
 * assert.equal(truncatedCaller("2001:db8:aa:bb::/64"), "2001:db8:aa::");
 * ```
 */
export function truncatedCaller(key: string): string {
  return key === NO_ADDRESS_KEY ? NO_ADDRESS_KEY : truncatedAddress(key.replace(/\/64$/, ""));
}

/**
 * The address the access log keeps: IPv4 truncated to /24 (`192.0.2.0`), IPv6 to /48 (`2001:db8:1::`).
 * The log never holds a full client address. A canonical IPv4 address (a caller key's spelling) is
 * cut as text; any other is parsed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(truncatedAddress("192.0.2.77"), "192.0.2.0");
 * assert.equal(truncatedAddress("2001:db8:aa:bb::1"), "2001:db8:aa::");
 * ```
 */
export function truncatedAddress(hostname: string): string {
  if (ipv4Value(hostname) !== undefined) return `${hostname.slice(0, hostname.lastIndexOf("."))}.0`;
  const parsed = parseIp(hostname);
  if (!parsed) return "unknown";
  const bytes = unmapIpv4(parsed);
  if (bytes.length === 4) return `${bytes[0]}.${bytes[1]}.${bytes[2]}.0`;
  const words: string[] = [];
  for (let i = 0; i < 6; i += 2) words.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  return `${words.join(":")}::`;
}
