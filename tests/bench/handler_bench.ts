/**
 * Micro benchmarks (`deno task bench`): the handler called in-process with real `Request`s for every
 * kind of answer, beside the in-process ceiling (cloning a prebuilt copy of the same response); the
 * ways to build a hot caller's response; the handler's own work (a stand-in request beside the
 * in-process reads floor); the limiter's decision alone; negotiation alone; the access-log line
 * alone.
 *
 * Each iteration builds its `Request` (so does a server), and comes from another caller of 262,144
 * (trusted-proxy mode, `X-Forwarded-For`), so that the limiter tracks real callers and admits them;
 * the 429 bench uses one caller over its limit.
 *
 * @module
 */

import type { AccessRecord } from "../../lib/access_log.ts";
import { createHandler } from "../../lib/handler.ts";
import { formatAccessRecord } from "../../lib/access_log.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { loadContent } from "../../lib/pages/content.ts";
import {
  loadNegotiator,
  memoize,
  preferredEncoding,
  preferredType,
} from "../../lib/http/negotiate.ts";
import { policyOf } from "../../lib/limit/core/decision.ts";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";
import { callerAddress, MANY_CALLERS } from "./_scenarios.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

const loaded = loadConfig(recordEnv({ TRUSTED_PROXIES: "127.0.0.1", ACCESS_LOG: "false" }));
if (!loaded.ok) throw new Error(loaded.errors.join("; "));
const config = loaded.config;
const content = loadContent(config, DISK_STATIC_FILES);
if (!content.ok) throw new Error(content.errors.join("; "));
const policy = policyOf(config);
const store = new MemoryStore(policy, { sweep: false });
let records = 0;
const handler = createHandler({ config, content: content.content, store });
const logged = createHandler({
  config,
  content: content.content,
  store: new MemoryStore(policy, { sweep: false }),
  accessLog: (record: AccessRecord) => {
    records += formatAccessRecord(record).length;
  },
});
const info = { remoteAddr: { hostname: "127.0.0.1" } };
const base = "http://localhost:8000";
const callers = Array.from({ length: MANY_CALLERS }, (_, i) => callerAddress(i, MANY_CALLERS));
let next = 0;
const caller = () => callers[next++ % MANY_CALLERS]!;

const etag = (await handler(new Request(`${base}/api/v1/platform`), info)).headers.get("etag")!;

interface Case {
  name: string;
  path: string;
  method?: string;
  headers?: Record<string, string>;
  status: number;
  oneCaller?: boolean;
}
const CASES: Case[] = [
  { name: "json", path: "/api/v1/platform", headers: { accept: "application/json" }, status: 200 },
  {
    name: "markdown",
    path: "/api/v1/platform",
    headers: { accept: "text/markdown" },
    status: 200,
  },
  { name: "html", path: "/developers", headers: { accept: "text/html" }, status: 200 },
  { name: "304", path: "/api/v1/platform", headers: { "if-none-match": etag }, status: 304 },
  { name: "404", path: "/nope", headers: { accept: "application/json" }, status: 404 },
  { name: "405", path: "/api/v1/platform", method: "POST", status: 405 },
  { name: "429", path: "/api/v1/platform", status: 429, oneCaller: true },
];

for (const c of CASES) {
  const request = (xff: string) =>
    new Request(`${base}${c.path}`, {
      method: c.method ?? "GET",
      headers: { ...c.headers, "x-forwarded-for": xff },
    });
  const xff = () => c.oneCaller ? "10.255.255.255" : caller();
  // The service must answer the expected status, or the bench would time something else.
  let probe = await handler(request(xff()), info);
  for (let i = 0; probe.status !== c.status && i < 100; i++) {
    probe = await handler(request(xff()), info);
  }
  if (probe.status !== c.status) throw new Error(`${c.name}: answered ${probe.status}`);
  const bytes = new Uint8Array(await probe.arrayBuffer());
  const prebuilt = new Response(probe.status === 304 ? null : bytes, {
    status: probe.status,
    headers: probe.headers,
  });

  Deno.bench({
    name: `ceiling: new Request + clone of the prebuilt ${c.name} response`,
    group: c.name,
    baseline: true,
    fn: () => {
      request(xff());
      prebuilt.clone();
    },
  });
  Deno.bench({
    name: `handler: ${c.name} (${c.status})`,
    group: c.name,
    fn: () => {
      handler(request(xff()), info);
    },
  });
  if (c.name === "json") {
    Deno.bench({
      name: `handler with access log: ${c.name} (${c.status})`,
      group: c.name,
      fn: () => {
        logged(request(xff()), info);
      },
    });
  }
}

// The hot caller (RATE_LIMIT=1000000, one address): a new RateLimit-Remaining on nearly every
// request, so its response is derived per request. The ways to build it with the changing values,
// beside the clone of a constant response.
const hotLoaded = loadConfig(recordEnv({
  TRUSTED_PROXIES: "127.0.0.1",
  RATE_LIMIT: "1000000",
  RATE_LIMIT_WINDOW_SECONDS: "1",
}));
if (!hotLoaded.ok) throw new Error(hotLoaded.errors.join("; "));
const hotHandler = createHandler({
  config: hotLoaded.config,
  content: content.content,
  store: new MemoryStore(policyOf(hotLoaded.config), { sweep: false }),
});
const hotRequest = () =>
  new Request(`${base}/api/v1/platform`, {
    headers: { accept: "application/json", "x-forwarded-for": "10.255.255.255" },
  });
const hotProbe = await hotHandler(hotRequest(), info);
const hotBody = await hotProbe.text();
const hotFields = [...hotProbe.headers];
const hotPrebuilt = new Response(hotBody, { status: 200, headers: hotFields });
const hotPrebuiltHeaders = new Headers(hotFields);
const fieldIndex = (name: string) => hotFields.findIndex(([n]) => n === name);
const [iRateLimit, iRemaining] = [fieldIndex("ratelimit"), fieldIndex("ratelimit-remaining")];
let hotRemaining = 999_999;
Deno.bench({
  name: "hot caller: clone of a constant response (the ceiling)",
  group: "hot caller",
  baseline: true,
  fn: () => {
    hotPrebuilt.clone();
  },
});
Deno.bench({
  name: "hot caller: clone, then set RateLimit and RateLimit-Remaining (what the cache does)",
  group: "hot caller",
  fn: () => {
    const headers = hotPrebuilt.clone().headers;
    const remaining = String(hotRemaining--);
    headers.set("ratelimit", `"default";r=${remaining};t=1`);
    headers.set("ratelimit-remaining", remaining);
  },
});
Deno.bench({
  name: "hot caller: new Response with the prebuilt [name, value][] and the two values substituted",
  group: "hot caller",
  fn: () => {
    const fields = hotFields.slice();
    const remaining = String(hotRemaining--);
    fields[iRateLimit] = ["ratelimit", `"default";r=${remaining};t=1`];
    fields[iRemaining] = ["ratelimit-remaining", remaining];
    new Response(hotBody, { status: 200, headers: fields });
  },
});
Deno.bench({
  name: "hot caller: new Response with a copy of a prebuilt Headers and two set()",
  group: "hot caller",
  fn: () => {
    const headers = new Headers(hotPrebuiltHeaders);
    const remaining = String(hotRemaining--);
    headers.set("ratelimit", `"default";r=${remaining};t=1`);
    headers.set("ratelimit-remaining", remaining);
    new Response(hotBody, { status: 200, headers });
  },
});
Deno.bench({
  name: "hot caller: the handler (new Request included)",
  group: "hot caller",
  fn: () => {
    hotHandler(hotRequest(), info);
  },
});

// The handler's own work, without the runtime's: a stand-in request whose fields are plain
// values (a real `Request` costs more to build than the handler does: the groups above are mostly
// `new Request`), beside the reads every server of this spec makes and the clone of a prebuilt
// response (the in-process reads floor). The clock advances one millisecond per 60 requests, so
// that each of the 262,144 callers comes back a few times per window, as in `bench:load`.
class StandInHeaders {
  forwarded = "";
  get(name: string): string | null {
    if (name === "host") return "127.0.0.1:8000";
    if (name === "accept") return "application/json";
    return name === "x-forwarded-for" ? this.forwarded : null;
  }
  has(_name: string): boolean {
    return false;
  }
}
const REQUESTS_PER_MS = 60;
const t0 = Date.now();
let standInTick = 0;
const standInNow = () => t0 + Math.floor(standInTick / REQUESTS_PER_MS);
const standInHandler = createHandler({
  config,
  content: content.content,
  store: new MemoryStore(policy, { sweep: false, now: standInNow }),
  now: standInNow,
});
const standInHeaders = new StandInHeaders();
const standIn = {
  method: "GET",
  url: `${base}/api/v1/platform`,
  headers: standInHeaders,
} as unknown as Request;
const standInPrebuilt = new Response(
  await (await standInHandler(standIn, info)).text(),
  { headers: (await standInHandler(standIn, info)).headers },
);
let readLengths = 0;
Deno.bench({
  name: "own work: the reads floor (stand-in request: the fields read, a prebuilt clone)",
  group: "own work",
  baseline: true,
  fn: () => {
    standInHeaders.forwarded = callers[standInTick++ % MANY_CALLERS]!;
    const h = standIn.headers;
    readLengths += standIn.method.length + standIn.url.length + info.remoteAddr.hostname.length +
      (h.get("host")?.length ?? 0) + (h.get("accept")?.length ?? 0) +
      (h.get("accept-encoding")?.length ?? 0) + (h.get("if-none-match")?.length ?? 0) +
      (h.get("x-forwarded-for")?.length ?? 0);
    standInPrebuilt.clone();
  },
});
Deno.bench({
  name: "own work: the handler (stand-in request, 262,144 callers)",
  group: "own work",
  fn: () => {
    standInHeaders.forwarded = callers[standInTick++ % MANY_CALLERS]!;
    standInHandler(standIn, info);
  },
});

const limiter = new MemoryStore(policy, { sweep: false });
let tick = 0;
Deno.bench({
  name: "limiter: hit() of one of 262,144 callers (admitted, sliding log kept)",
  group: "limiter",
  fn: () => {
    limiter.hit(caller(), t0 + (tick++ >> 4));
  },
});
const full = new MemoryStore(policy, { sweep: false });
for (let i = 0; i < 60; i++) full.hit("one", t0);
Deno.bench({
  name: "limiter: hit() of a caller over its limit (refused)",
  group: "limiter",
  fn: () => {
    full.hit("one", t0 + 1000);
  },
});

// Weighted values need negotiator, which the service loads on the first request that needs it.
await loadNegotiator();
const accepts = [
  "application/json",
  "text/markdown",
  "text/markdown;q=0.9, application/json;q=0.5",
  "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
];
let a = 0;
Deno.bench({
  name: "negotiation: preferredType() parsing Accept (not memoised)",
  group: "negotiation",
  fn: () => {
    preferredType(accepts[a++ % accepts.length]!, ["application/json", "text/markdown"]);
  },
});
Deno.bench({
  name: "negotiation: preferredEncoding() parsing Accept-Encoding (not memoised)",
  group: "negotiation",
  fn: () => {
    preferredEncoding("gzip, deflate, br, zstd");
  },
});
const memoType = memoize((accept) => preferredType(accept, ["application/json", "text/markdown"]));
Deno.bench({
  name: "negotiation: memoised, as the handler calls it",
  group: "negotiation",
  fn: () => {
    memoType(accepts[a++ % accepts.length]!);
  },
});

const record: AccessRecord = {
  time: new Date(t0).toISOString(),
  method: "GET",
  path: "/api/v1/platform",
  status: 200,
  ms: 0,
  caller: "192.0.2.0",
};
Deno.bench({
  name: "access log: one line formatted",
  group: "access log",
  fn: () => {
    records += formatAccessRecord(record).length;
  },
});
Deno.bench({
  name: "access log: new Date().toISOString() (what a line would cost without the memo)",
  group: "access log",
  fn: () => {
    records += new Date(t0 + tick++).toISOString().length;
  },
});
