/**
 * The VM recipe's files as tests run them: deploy/discovery@.service's settings, and real nginx from
 * deploy/nginx.conf with loopback ports and temporary paths, in front of service processes: with the
 * shipped client timeouts, or short ones for the test that times clients out. A request that fails
 * through it says why in nginx's words (its error log, at level info).
 *
 * @module
 */

import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { freePort, waitForPort } from "./_redis.ts";
import { findTool, toolUnavailableReason } from "./_tools.ts";

/** The folder of the files an operator installs. */
export const DEPLOY = join(import.meta.dirname!, "..", "deploy");
/** deploy/discovery@.service as shipped. */
export const UNIT = Deno.readTextFileSync(join(DEPLOY, "discovery@.service"));
/** deploy/nginx.conf as shipped. */
export const NGINX_CONF = Deno.readTextFileSync(join(DEPLOY, "nginx.conf"));

/** The unit's `[Service]` settings, each key with every value it is given. */
export function serviceSettings(unit: string): Map<string, string[]> {
  const section = unit.split(/^\[Service\]$/m)[1]!.split(/^\[/m)[0]!;
  const settings = new Map<string, string[]>();
  for (const line of section.split("\n")) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (match) settings.set(match[1]!, [...settings.get(match[1]!) ?? [], match[2]!]);
  }
  return settings;
}

/**
 * The client timeouts (seconds) of an nginx started with `shortTimeouts`, in place of the shipped
 * ones (10 s, keep-alive 15 s), so that the test of idle and slow clients is quick. Only that test
 * uses them: every client of such an nginx, the well-behaved ones too, must send its request head
 * within this time of nginx accepting its connection, or nginx closes the connection without an
 * answer ("client timed out ... while waiting for request"; the client reads "socket hang up").
 * With 1 s, a test's own client did not, once, with two suites on the 2 cores: its process sent
 * nothing for over a second after connecting. 3 s leaves it room and still cuts quickly.
 */
export const TEST_TIMEOUT_S = 3;

/** The shipped client timeouts and their replacements by {@linkcode TEST_TIMEOUT_S}. */
const SHORT_TIMEOUTS: [RegExp, string][] = [
  [/client_header_timeout 10s;/, `client_header_timeout ${TEST_TIMEOUT_S}s;`],
  [/client_body_timeout 10s;/, `client_body_timeout ${TEST_TIMEOUT_S}s;`],
  [/keepalive_timeout 15s;/, `keepalive_timeout ${TEST_TIMEOUT_S}s;`],
  [/send_timeout 10s;/, `send_timeout ${TEST_TIMEOUT_S}s;`],
];

/**
 * The access log's format of an nginx started with `accessLog`: one JSON line per request, written
 * when it ends, with what nginx did with it (each instance tried, in order; a `:` where the request
 * went on to `@last_resort`).
 */
const ACCESS_LOG_FORMAT = `log_format tested escape=json '{"at":$msec,"ms":$request_time,` +
  `"client":"$remote_addr","status":$status,"upstream":"$upstream_addr"}';`;

/** What nginx did with one request, from the access log of an nginx started with `accessLog`. */
export interface Handled {
  /** When it started, in ms since the epoch (nginx's clock, to the millisecond). */
  startedAt: number;
  /** How long nginx took to answer it, in ms. */
  ms: number;
  /** The client's address. */
  client: string;
  /** The status nginx answered. */
  status: number;
  /**
   * Each instance tried, in order (`127.0.0.1:8001, 127.0.0.1:8002`), a ` : ` before those of the
   * last resort; empty for an answer of nginx's own.
   */
  upstream: string;
}

/** Options of {@linkcode testNginxConf} and {@linkcode startNginx}. */
export interface TestNginxOptions {
  /** Client timeouts of {@linkcode TEST_TIMEOUT_S} (only for the test of idle and slow clients). */
  shortTimeouts?: boolean;
  /** An access log (`access.log` in the folder) in place of the shipped `access_log off`. */
  accessLog?: boolean;
  /** Another nginx.conf's text in place of the shipped one: a benchmark's reference. */
  conf?: string;
}

/**
 * The shipped nginx.conf with loopback ports and temporary paths, the instances' ports replaced by
 * `upstreamPorts` in order; with `shortTimeouts`, the client timeouts are {@linkcode TEST_TIMEOUT_S};
 * with `accessLog`, each request is logged in `dir` as {@linkcode Handled} reads it.
 */
export function testNginxConf(
  dir: string,
  port: number,
  upstreamPorts: [number, number],
  options: TestNginxOptions = {},
): string {
  const substitutions: [RegExp, string][] = [
    [/^user www-data;$/m, ""],
    [/^worker_processes auto;$/m, "worker_processes 1;"],
    [/^pid \/run\/nginx\.pid;$/m, `pid ${join(dir, "nginx.pid")};`],
    [
      /^error_log \/var\/log\/nginx\/error\.log warn;$/m,
      `error_log ${join(dir, "error.log")} info;`,
    ],
    [/^ {8}listen 80;$/m, `        listen 127.0.0.1:${port};`],
    [/^ {8}listen \[::\]:80;$/m, ""],
    // Every upstream block that names the instances: the fast one and the last resort.
    [/server 127\.0\.0\.1:8001 /g, `server 127.0.0.1:${upstreamPorts[0]} `],
    [/server 127\.0\.0\.1:8002 /g, `server 127.0.0.1:${upstreamPorts[1]} `],
    ...options.shortTimeouts ? SHORT_TIMEOUTS : [],
    ...options.accessLog
      ? [[
        /^ {4}access_log off;$/m,
        `    ${ACCESS_LOG_FORMAT}\n    access_log ${join(dir, "access.log")} tested;`,
      ] as [RegExp, string]]
      : [],
  ];
  let conf = options.conf ?? NGINX_CONF;
  for (const [pattern, replacement] of substitutions) {
    // Every substitution must apply: the shipped file is what is tested.
    assert.match(conf, pattern);
    conf = conf.replace(pattern, replacement);
  }
  return conf;
}

/** The timeouts of deploy/nginx.conf's fast path that decide what a hung instance costs. */
export interface HangTimeouts {
  /** `proxy_read_timeout` of `location /`, in ms: how long a request waits for a hung instance. */
  readTimeoutMs: number;
  /**
   * The instances' `fail_timeout`, in ms: how long nginx leaves an instance out once a request to
   * it failed; undefined where they have `max_fails=0` (never left out).
   */
  failTimeoutMs: number | undefined;
}

/** The {@linkcode HangTimeouts} of an nginx.conf (the shipped one by default). */
export function hangTimeouts(conf = NGINX_CONF): HangTimeouts {
  const location = /location \/ \{([^}]*)\}/.exec(conf)?.[1] ?? "";
  const read = /proxy_read_timeout (\d+)(ms|s);/.exec(location);
  assert.ok(read, "location / has a proxy_read_timeout");
  const upstream = /upstream discovery \{([^}]*)\}/.exec(conf)?.[1] ?? "";
  const fail = /max_fails=[1-9]\d* fail_timeout=(\d+)s/.exec(upstream);
  return {
    readTimeoutMs: Number(read[1]) * (read[2] === "s" ? 1000 : 1),
    failTimeoutMs: fail ? Number(fail[1]) * 1000 : undefined,
  };
}

/** The error log of each nginx {@linkcode startNginx} runs, by its port. */
const errorLogs = new Map<number, string>();
/** How many different lines of an error log a failure shows. */
const LOG_LINES_SHOWN = 30;
/** Lines every run writes: start-up, the tests' own probes and clients done with their connection. */
const ROUTINE =
  /\[notice\]|setrlimit\(RLIMIT_NOFILE|closed keepalive connection|client closed connection while waiting for request/;

/** The error log of the nginx on `port` in short, or "" when none of ours runs there. */
export function nginxErrorLog(port: number): string {
  const path = errorLogs.get(port);
  if (path === undefined) return "";
  try {
    return condenseErrorLog(Deno.readTextFileSync(path));
  } catch (error) {
    return `(its error log cannot be read: ${error})`;
  }
}

/**
 * An error log in short: each thing it says but the routine lines, once, in the order first said,
 * with its first line (time, connection number) and how many times and until when it was said.
 */
export function condenseErrorLog(text: string): string {
  const said = new Map<string, { line: string; times: number; last: string }>();
  for (const line of text.split("\n")) {
    if (line === "" || ROUTINE.test(line)) continue;
    const match = /^(\S+ (\S+)) (\[\w+\]) \d+#\d+: (?:\*\d+ )?(.*)$/.exec(line);
    const key = match ? `${match[3]} ${match[4]}` : line;
    const entry = said.get(key);
    if (entry) {
      entry.times++;
      entry.last = match?.[2] ?? "";
    } else said.set(key, { line, times: 1, last: match?.[2] ?? "" });
  }
  if (said.size === 0) return "(nothing but routine lines)";
  const lines = [...said.values()].map(({ line, times, last }) =>
    times === 1 ? line : `${line} [${times} times, the last at ${last}]`
  );
  return lines.length <= LOG_LINES_SHOWN
    ? lines.join("\n")
    : [...lines.slice(0, LOG_LINES_SHOWN), `... and ${lines.length - LOG_LINES_SHOWN} more`].join(
      "\n",
    );
}

/**
 * A GET through nginx from the local address `from`. A request that fails through one of our nginx
 * processes says why in nginx's words: the error names the last lines of its error log.
 */
export async function get(
  port: number,
  from: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; remaining: string | undefined }> {
  try {
    return await getOnce(port, from, headers);
  } catch (error) {
    const log = nginxErrorLog(port);
    if (log === "") throw error;
    throw new Error(
      `GET through nginx from ${from} failed (${error}); nginx's error log:\n${log}`,
      {
        cause: error,
      },
    );
  }
}

function getOnce(
  port: number,
  from: string,
  headers: Record<string, string>,
): Promise<{ status: number; remaining: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: "127.0.0.1",
      port,
      path: "/api/v1/platform",
      localAddress: from,
      agent: false,
      headers,
    }, (response) => {
      response.resume();
      response.on("end", () =>
        resolve({
          status: response.statusCode!,
          remaining: response.headers["ratelimit-remaining"] as string | undefined,
        }));
    });
    req.on("error", reject);
    req.end();
  });
}

export const noNginx = toolUnavailableReason("nginx", "nginx-light");

/** An nginx that {@linkcode startNginx} runs. */
export interface TestNginx {
  /** Its port on 127.0.0.1. */
  port: number;
  /** Its error log (level info: every connection nginx closes says why), in short. */
  errorLog(): string;
  /** How many lines of its error log so far match `pattern`. */
  errorLogCount(pattern: RegExp): number;
  /** Every request logged so far (started with `accessLog`; none otherwise). */
  handled(): Handled[];
  /** Stops it (SIGQUIT) and waits for its exit. */
  stop(): Promise<void>;
}

/**
 * nginx run from the test configuration on a free loopback port, in front of `upstreams`; with the
 * shipped client timeouts unless `shortTimeouts` (only for the test of idle and slow clients).
 */
export async function startNginx(
  upstreams: [number, number],
  options: TestNginxOptions = {},
): Promise<TestNginx> {
  const dir = Deno.makeTempDirSync();
  Deno.chmodSync(dir, 0o755);
  const port = freePort();
  Deno.writeTextFileSync(join(dir, "nginx.conf"), testNginxConf(dir, port, upstreams, options));
  const nginx = new Deno.Command(findTool("nginx")!, {
    args: [
      "-p",
      dir,
      "-c",
      join(dir, "nginx.conf"),
      "-e",
      join(dir, "error.log"),
      "-g",
      "daemon off;",
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(nginx.stderr).text();
  errorLogs.set(port, join(dir, "error.log"));
  const stop = async () => {
    nginx.kill("SIGQUIT");
    await nginx.status;
    errorLogs.delete(port);
    assert.doesNotMatch(await stderr, /\[emerg\]/);
  };
  await waitForPort(port, 5000).catch(async (error) => {
    await stop();
    throw error;
  });
  const accessLog = options.accessLog ? accessLogReader(join(dir, "access.log")) : () => [];
  const errorLogCount = (pattern: RegExp) =>
    Deno.readTextFileSync(join(dir, "error.log")).split("\n").filter((line) => pattern.test(line))
      .length;
  return { port, errorLog: () => nginxErrorLog(port), errorLogCount, handled: accessLog, stop };
}

/**
 * A reader of an access log in {@linkcode ACCESS_LOG_FORMAT}: each call reads only what nginx
 * wrote since the last (a test that looks often does not parse tens of thousands of lines each
 * time, on the cores its load shares) and returns every request so far.
 */
function accessLogReader(path: string): () => Handled[] {
  const handled: Handled[] = [];
  let offset = 0;
  return () => {
    let bytes: Uint8Array;
    try {
      using file = Deno.openSync(path);
      file.seekSync(offset, Deno.SeekMode.Start);
      bytes = new Uint8Array(file.statSync().size - offset);
      let read = 0;
      while (read < bytes.length) {
        const n = file.readSync(bytes.subarray(read));
        if (n === null) break;
        read += n;
      }
      bytes = bytes.subarray(0, read);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return handled;
      throw error;
    }
    // A line nginx is writing now may be cut short: only whole lines are read, the rest next time.
    const whole = bytes.lastIndexOf(0x0a) + 1;
    offset += whole;
    for (const line of new TextDecoder().decode(bytes.subarray(0, whole)).split("\n")) {
      if (line === "") continue;
      const { at, ms, client, status, upstream } = JSON.parse(line);
      const took = Math.round(ms * 1000);
      handled.push({ startedAt: Math.round(at * 1000) - took, ms: took, client, status, upstream });
    }
    return handled;
  };
}
