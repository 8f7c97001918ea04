/**
 * What a hostile header value costs the service (issue 31, item 1): for each header the service
 * reads (`Accept`, `Accept-Encoding`, `If-None-Match`, `Host`, `X-Forwarded-For`, `Forwarded`),
 * several of the worst values we could build, each sent in a request whose head is as long as a
 * reference request's, which carries the same number of bytes in a padding field the service never
 * reads (each request's value ends with its own counter, so that no memo answers it). Each ratio is
 * the median time of the hostile request over the padded one's, measured
 * alternately on one keep-alive connection to the service in its own process (trusted-proxy mode, so
 * that the forwarded headers are parsed). The target is at most 3.
 *
 * `deno task bench:headers [--requests N] [--head BYTES]` (default 200 requests of each, 60,000-byte
 * values; Deno refuses a head over about 64 KiB).
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { startService } from "../_service_process.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    requests: { type: "string", default: "200" },
    head: { type: "string", default: "60000" },
  },
});
const REQUESTS = Number(args.requests);
const SIZE = Number(args.head);

/** A value of about `size` characters: `unit` repeated, after `prefix`. */
function repeat(unit: string, size: number, prefix = ""): string {
  return prefix + unit.repeat(Math.max(1, Math.floor((size - prefix.length) / unit.length)));
}

/** The hostile values, by header. Each is its own case; the worst of a header is its ratio. */
const CASES: Record<string, Record<string, string>> = {
  accept: {
    "quote then commas": repeat(",", SIZE, '"'),
    "quote in a parameter then commas": repeat(",", SIZE, 'text/markdown;a="'),
    "many ranges with q": repeat("a/b;q=0.5,", SIZE),
    "many markdown ranges": repeat("text/markdown;q=0.9,", SIZE),
    "semicolons": repeat(";", SIZE, "text/markdown"),
    "equals in one parameter": repeat("=", SIZE, "text/markdown;q"),
  },
  "accept-encoding": {
    "quote then commas": repeat(",", SIZE, '"'),
    "many codings with q": repeat("gzip;q=0.5,", SIZE),
    "many unknown codings": repeat("x,", SIZE),
    "semicolons": repeat(";", SIZE, "br"),
  },
  "if-none-match": {
    "many tags": repeat('"abc",', SIZE),
    "many weak tags": repeat('W/"a",', SIZE),
    "commas": repeat(",", SIZE),
    "one long tag": repeat("a", SIZE, '"') + '"',
  },
  host: {
    "long valid name": repeat("a", SIZE),
    "long name then a slash": repeat("a", SIZE) + "/",
    "long port": repeat("1", SIZE, "a:"),
    "dots": repeat(".", SIZE),
  },
  "x-forwarded-for": {
    "trusted hops": repeat("127.0.0.1,", SIZE),
    "ipv6 trusted hops": repeat("::ffff:127.0.0.1,", SIZE),
    "commas": repeat(",", SIZE, "192.0.2.1"),
    "one long entry": repeat("1", SIZE),
  },
  forwarded: {
    "trusted hops": repeat("for=127.0.0.1,", SIZE),
    "pairs": repeat(";a=b", SIZE, "for=127.0.0.1"),
    "semicolons": repeat(";", SIZE),
    "quoted hops": repeat('for="[::1]:80",', SIZE),
  },
};

const ENCODER = new TextEncoder();

/** A request head with `name: value` beside the fields every case sends. */
function head(host: string, name: string, value: string): Uint8Array {
  const fields = name === "host" ? `Host: ${value}\r\n` : `Host: ${host}\r\n${name}: ${value}\r\n`;
  return ENCODER.encode(`GET /api/v1/platform HTTP/1.1\r\n${fields}\r\n`);
}

/** Sends `request` on `conn` and reads one whole response; returns its status and milliseconds. */
async function send(
  conn: Deno.TcpConn,
  request: Uint8Array,
): Promise<{ status: number; ms: number }> {
  const buffer = new Uint8Array(65_536);
  const started = performance.now();
  let written = 0;
  while (written < request.length) written += await conn.write(request.subarray(written));
  // Bytes, not text: a gzip or br body does not decode to as many characters as it has bytes.
  let received = new Uint8Array(0);
  let text = "";
  for (;;) {
    const n = await conn.read(buffer);
    if (n === null) throw new Error("the service closed the connection");
    const joined = new Uint8Array(received.length + n);
    joined.set(received);
    joined.set(buffer.subarray(0, n), received.length);
    received = joined;
    text = new TextDecoder("latin1").decode(received);
    const end = text.indexOf("\r\n\r\n");
    if (end === -1) continue;
    const length = Number(/\r\ncontent-length: (\d+)/i.exec(text)?.[1] ?? 0);
    if (received.length >= end + 4 + length) break;
  }
  return { status: Number(text.slice(9, 12)), ms: performance.now() - started };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** Each case's row, alternating hostile and padded requests on one connection. */
async function measure(url: string, name: string, label: string, value: string): Promise<number> {
  const { hostname, port, host } = new URL(url);
  // Each request's value ends differently, so no memo answers it: every one is parsed.
  const hostileAt = (i: number) =>
    head(host, name, value.slice(0, -6) + i.toString(36).padStart(6, "0"));
  const padded = head(host, "x-padding", "p".repeat(value.length));
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const times = { hostile: [] as number[], padded: [] as number[] };
  let status = 0;
  try {
    for (let i = 0; i < REQUESTS; i++) {
      const a = await send(conn, hostileAt(i));
      const b = await send(conn, padded);
      status = a.status;
      times.hostile.push(a.ms);
      times.padded.push(b.ms);
    }
  } finally {
    conn.close();
  }
  const ratio = median(times.hostile) / median(times.padded);
  rows.push(
    `| ${name} | ${label} | ${status} | ${median(times.hostile).toFixed(3)} | ${
      median(times.padded).toFixed(3)
    } | ${ratio.toFixed(2)} |`,
  );
  console.error(rows.at(-1));
  return ratio;
}

const rows: string[] = [];
let worst = 0;
// The forwarded header is parsed only when it is the configured one: one service per header.
for (const proxyHeader of ["x-forwarded-for", "forwarded"]) {
  const service = await startService({
    RATE_LIMIT: "1000000",
    TRUSTED_PROXIES: "127.0.0.1,::1",
    TRUSTED_PROXY_HEADER: proxyHeader,
  });
  try {
    for (const [name, cases] of Object.entries(CASES)) {
      if ((name === "forwarded") !== (proxyHeader === "forwarded")) continue;
      for (const [label, value] of Object.entries(cases)) {
        worst = Math.max(worst, await measure(service.url, name, label, value));
      }
    }
  } finally {
    await service.stop();
  }
}
console.log(
  `Values of about ${SIZE} characters, ${REQUESTS} requests of each, medians in ms.\n\n` +
    "| Header | Value | Status | Hostile | Padded | Ratio |\n| --- | --- | --- | ---: | ---: | ---: |\n" +
    `${rows.join("\n")}\n\nWorst ratio: ${worst.toFixed(2)}`,
);
