/**
 * Tests of configuration loading: defaults, every variable, and every problem reported at once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { loadConfig } from "../lib/config/config.ts";
import { recordEnv } from "../lib/config/env.ts";
import { formatConfigErrors } from "../lib/config/messages.ts";

function errorsOf(env: Parameters<typeof recordEnv>[0]): string[] {
  const result = loadConfig(recordEnv(env));
  assert.equal(result.ok, false, "expected the configuration to be refused");
  return result.ok ? [] : result.errors;
}

function configOf(env: Parameters<typeof recordEnv>[0]) {
  const result = loadConfig(recordEnv(env));
  if (!result.ok) assert.fail(result.errors.join("\n"));
  return result.config;
}

Deno.test("loadConfig() needs no variables: every one has a default", () => {
  const config = configOf({});
  assert.equal(config.port, 8000);
  assert.equal(config.hostname, "0.0.0.0");
  assert.equal(config.reusePort, false);
  assert.equal(config.baseUrl, "http://localhost:8000");
  assert.equal(config.rateLimit, 60);
  assert.equal(config.rateLimitWindowSeconds, 60);
  assert.equal(config.trustedProxies.ranges.length, 0);
  assert.equal(config.forwardedHeader, "x-forwarded-for");
  assert.equal(config.deprecation, undefined);
  assert.equal(config.sunset, undefined);
  assert.equal(config.accessLog, true);
  assert.equal(config.documentationUrl, "http://localhost:8000/");
  assert.equal(config.developerResourcesUrl, "http://localhost:8000/developers");
  assert.equal(config.openapiUrl, "http://localhost:8000/openapi.json");
  assert.equal(config.agentInstructionsUrl, "http://localhost:8000/llms.txt");
  assert.equal(config.supportUrl, "mailto:support@example.com");
});

Deno.test("loadConfig() builds default links from PUBLIC_BASE_URL, without its trailing slash", () => {
  const config = configOf({
    PUBLIC_BASE_URL: "https://discovery.example.com/",
    SUPPORT_EMAIL: "help@example.org",
  });
  assert.equal(config.baseUrl, "https://discovery.example.com");
  assert.equal(config.openapiUrl, "https://discovery.example.com/openapi.json");
  assert.equal(config.supportUrl, "mailto:help@example.org");
  assert.equal(
    configOf({ PUBLIC_BASE_URL: "https://example.com/discovery/" }).baseUrl,
    "https://example.com/discovery",
  );
});

Deno.test("loadConfig() reads every variable", () => {
  const config = configOf({
    PORT: "9000",
    HOSTNAME: "127.0.0.1",
    REUSE_PORT: "true",
    PRODUCT_NAME: "Acme Legal",
    PRODUCT_DESCRIPTION: "Research.",
    DOCUMENTATION_URL: "https://docs.example.com/",
    DEVELOPER_RESOURCES_URL: "https://dev.example.com/",
    OPENAPI_URL: "https://dev.example.com/openapi.json",
    AGENT_INSTRUCTIONS_URL: "https://dev.example.com/llms.txt",
    SUPPORT_URL: "https://help.example.com/",
    RATE_LIMIT: "100",
    RATE_LIMIT_WINDOW_SECONDS: "30",
    RATE_LIMIT_MAX_CALLERS: "1000",
    TRUSTED_PROXIES: "10.0.0.0/8",
    TRUSTED_PROXY_HEADER: "Forwarded",
    DEPRECATION_DATE: "2027-01-01",
    SUNSET_DATE: "2027-04-01T00:00:00Z",
    ACCESS_LOG: "off",
  });
  assert.equal(config.port, 9000);
  assert.equal(config.hostname, "127.0.0.1");
  assert.equal(config.reusePort, true);
  assert.equal(config.name, "Acme Legal");
  assert.equal(config.supportUrl, "https://help.example.com/");
  assert.equal(config.rateLimit, 100);
  assert.equal(config.rateLimitWindowSeconds, 30);
  assert.equal(config.rateLimitMaxCallers, 1000);
  assert.equal(config.trustedProxies.ranges.length, 1);
  assert.equal(config.forwardedHeader, "forwarded");
  assert.equal(config.deprecation?.toISOString(), "2027-01-01T00:00:00.000Z");
  assert.equal(config.sunset?.toISOString(), "2027-04-01T00:00:00.000Z");
  assert.equal(config.accessLog, false);
});

Deno.test("loadConfig() lists every problem at once", () => {
  const errors = errorsOf({
    PORT: "eighty",
    PUBLIC_BASE_URL: "ftp://example.com",
    RATE_LIMIT: "0",
    RATE_LIMIT_WINDOW_SECONDS: "-5",
    TRUSTED_PROXIES: "10.0.0.0/8, nope",
    TRUSTED_PROXY_HEADER: "x-real-ip",
    SUPPORT_EMAIL: "not-an-email",
    SUPPORT_URL: "javascript:alert(1)",
    ACCESS_LOG: "maybe",
    REUSE_PORT: "both",
  });
  const expected = [
    /^PORT must be a whole number/,
    /^PUBLIC_BASE_URL must use http or https/,
    /^RATE_LIMIT must be from 1/,
    /^RATE_LIMIT_WINDOW_SECONDS must be a whole number/,
    /^TRUSTED_PROXIES .*"nope"/,
    /^TRUSTED_PROXY_HEADER must be/,
    /^SUPPORT_EMAIL must be an email address/,
    /^SUPPORT_URL must be an http, https or mailto URI/,
    /^ACCESS_LOG must be true or false/,
    /^REUSE_PORT must be true or false/,
  ];
  for (const pattern of expected) {
    assert.ok(errors.some((e) => pattern.test(e)), `${pattern} in ${errors.join(" | ")}`);
  }
  assert.equal(errors.length, expected.length);
  const message = formatConfigErrors(errors);
  assert.match(message, /^Configuration is invalid \(10 problems\); nothing is served:/);
});

Deno.test("loadConfig() refuses a public base URL with a query, fragment or credentials", () => {
  for (
    const url of [
      "https://example.com/?a=1",
      "https://example.com/#x",
      "https://u:p@example.com",
      "not a url",
    ]
  ) {
    assert.equal(errorsOf({ PUBLIC_BASE_URL: url }).length, 1, url);
  }
});

Deno.test("loadConfig() enforces the 90-day rule between Deprecation and Sunset", () => {
  assert.match(
    errorsOf({ DEPRECATION_DATE: "2027-01-01", SUNSET_DATE: "2027-03-31" })[0]!,
    /SUNSET_DATE must be at least 90 days after DEPRECATION_DATE .* 89 days apart/,
  );
  assert.ok(configOf({ DEPRECATION_DATE: "2027-01-01", SUNSET_DATE: "2027-04-01" }).sunset);
  assert.match(errorsOf({ SUNSET_DATE: "2027-04-01" })[0]!, /set both or neither/);
  assert.match(
    errorsOf({ DEPRECATION_DATE: "01/02/2027", SUNSET_DATE: "2027-06-01" })[0]!,
    /ISO 8601/,
  );
  assert.match(
    errorsOf({ DEPRECATION_DATE: "2027-02-30", SUNSET_DATE: "2027-06-01" })[0]!,
    /ISO 8601/,
  );
});

Deno.test("loadConfig() treats empty and blank variables as unset", () => {
  const config = configOf({ PORT: "", PRODUCT_NAME: "  ", RATE_LIMIT: "" });
  assert.equal(config.port, 8000);
  assert.equal(config.name, "Legal Intelligence Platform");
  assert.equal(config.rateLimit, 60);
});

Deno.test("loadConfig() checks HOSTNAME and never echoes a password from PUBLIC_BASE_URL", () => {
  for (const hostname of ["127.0.0.1", "::1", "0.0.0.0", "localhost", "pod-7f9c.svc"]) {
    assert.equal(configOf({ HOSTNAME: hostname }).hostname, hostname);
  }
  for (const hostname of ["not a host", "[::1]", "-bad", "a/b", "x..y"]) {
    assert.match(
      errorsOf({ HOSTNAME: hostname })[0]!,
      /^HOSTNAME must be an IP address or a host name/,
    );
  }
  const [message] = errorsOf({ PUBLIC_BASE_URL: "https://user:hunter2@example.com/" });
  assert.match(message!, /must not carry credentials/);
  assert.ok(!message!.includes("hunter2"));
});

Deno.test("loadConfig() refuses a REDIS_URL the Redis client would throw on, without echoing its password", () => {
  const redis = { RATE_LIMIT_STORE: "redis" } as const;
  assert.deepEqual(errorsOf({ ...redis, REDIS_URL: "redis://:secret@127.0.0.1:6379/limits" }), [
    'REDIS_URL may name a database number as its path (redis://host:6379/0) and nothing else, got "redis://:***@127.0.0.1:6379/limits"',
  ]);
  assert.deepEqual(errorsOf({ ...redis, REDIS_URL: "redis://user%zz@127.0.0.1:6379" }), [
    // A userinfo without a colon may be a token: masked whole.
    'REDIS_URL has a user name or password with a malformed %-escape, got "redis://***@127.0.0.1:6379"',
  ]);
  for (const url of ["redis://127.0.0.1:6379", "redis://127.0.0.1:6379/", "rediss://h:6380/3"]) {
    assert.equal(configOf({ ...redis, REDIS_URL: url }).redisUrl, url);
  }
});

Deno.test("loadConfig() names an unescaped #, / or ? in REDIS_URL's password and says to percent-encode it", () => {
  const redis = { RATE_LIMIT_STORE: "redis" } as const;
  const hint =
    /^REDIS_URL has a user name or password holding a "#", "\/" or "\?", which ends that part of a URL: percent-encode it \(# as %23, \/ as %2F, \? as %3F; encodeURIComponent does\), got "rediss?:\/\/[^"]*\*\*\*@/;
  // The parser refuses the first two; the third parses, as host "user" and port 12.
  for (
    const url of [
      "redis://:pa#ss@127.0.0.1:6379",
      "rediss://:pa/ss@h:6380",
      "redis://user:12/x@h:1",
    ]
  ) {
    const errors = errorsOf({ ...redis, REDIS_URL: url });
    assert.equal(errors.length, 1, errors.join("\n"));
    assert.match(errors[0]!, hint);
    assert.ok(!/pa#ss|pa\/ss|12\/x/.test(errors[0]!), errors[0]!);
  }
  const cluster = { ...redis, REDIS_TYPE: "cluster" } as const;
  assert.match(
    errorsOf({ ...cluster, REDIS_URL: "redis://:a?b@h:7000,redis://:a?b@i:7000" })[0]!,
    hint,
  );
  // Percent-encoded, the same password is taken.
  const encoded = `redis://:${encodeURIComponent("pa#s/s?")}@127.0.0.1:6379`;
  assert.equal(configOf({ ...redis, REDIS_URL: encoded }).redisUrl, encoded);
});

Deno.test("loadConfig() reads REDIS_TYPE, a list of seed nodes or sentinels, and REDIS_SENTINEL_MASTER", () => {
  const redis = { RATE_LIMIT_STORE: "redis" } as const;
  const single = configOf({ ...redis, REDIS_URL: "redis://127.0.0.1:6379" });
  assert.equal(single.redisType, "single");
  const seeds = "rediss://user:pw@10.0.0.1:7000, rediss://user:pw@10.0.0.2:7000";
  const cluster = configOf({ ...redis, REDIS_TYPE: "Cluster", REDIS_URL: seeds });
  assert.equal(cluster.redisType, "cluster");
  assert.equal(cluster.redisUrl, seeds);
  const sentinel = configOf({
    ...redis,
    REDIS_TYPE: "sentinel",
    REDIS_URL: "redis://10.0.0.1:26379,redis://10.0.0.2:26379",
    REDIS_SENTINEL_MASTER: "limits",
  });
  assert.equal(sentinel.redisSentinelMaster, "limits");
});

Deno.test("loadConfig() says one sentence per Redis topology problem, without echoing a password", () => {
  const redis = { RATE_LIMIT_STORE: "redis" } as const;
  assert.deepEqual(errorsOf({ ...redis, REDIS_TYPE: "replicated", REDIS_URL: "redis://h:6379" }), [
    'REDIS_TYPE must be single, cluster or sentinel, got "replicated"',
  ]);
  assert.deepEqual(errorsOf({ ...redis, REDIS_URL: "redis://a:6379,redis://b:6379" }), [
    "REDIS_URL names 2 URLs, and REDIS_TYPE=single takes one: set REDIS_TYPE=cluster (seed nodes) or sentinel (sentinels) for a list",
  ]);
  assert.deepEqual(errorsOf({ ...redis, REDIS_TYPE: "sentinel", REDIS_URL: "redis://a:26379" }), [
    "REDIS_SENTINEL_MASTER is required with REDIS_TYPE=sentinel: the name the sentinels monitor the primary by (sentinel monitor <name> ...)",
  ]);
  assert.deepEqual(
    errorsOf({ ...redis, REDIS_URL: "redis://a:6379", REDIS_SENTINEL_MASTER: "limits" }),
    [
      "REDIS_SENTINEL_MASTER is set but REDIS_TYPE is single: set REDIS_TYPE=sentinel, or unset REDIS_SENTINEL_MASTER",
    ],
  );
  assert.deepEqual(
    errorsOf({
      ...redis,
      REDIS_TYPE: "cluster",
      REDIS_URL: "redis://:secret@a:7000/2,http://b:7000,rediss://:secret@c:7000",
    }),
    [
      'REDIS_URL may not name a database with REDIS_TYPE=cluster: the limiter uses database 0 there, got "redis://:***@a:7000/2"',
      'REDIS_URL must be a comma-separated list of redis:// or rediss:// URLs, got "http://b:7000"',
      "REDIS_URL mixes redis:// and rediss://: every node of a cluster or Sentinel setup is reached the same way",
    ],
  );
  assert.deepEqual(
    errorsOf({ ...redis, REDIS_TYPE: "cluster", REDIS_URL: "redis://:a@h:7000,redis://:b@i:7000" }),
    [
      "REDIS_URL has URLs with different user names or passwords: every node is reached with the same credentials",
    ],
  );
  assert.deepEqual(errorsOf({ ...redis, REDIS_TYPE: "cluster" }), [
    "REDIS_URL is required with RATE_LIMIT_STORE=redis (e.g. redis://10.0.0.1:7000,redis://10.0.0.2:7000)",
  ]);
});

Deno.test("CONTENT_SIGNAL takes the three keys once each, yes or no, in any order, and is normalised", () => {
  const signal = (value?: string) => {
    const result = loadConfig(recordEnv(value === undefined ? {} : { CONTENT_SIGNAL: value }));
    return result.ok ? result.config.contentSignal : result.errors;
  };
  assert.equal(signal(), "search=yes, ai-input=yes, ai-train=no");
  assert.equal(
    signal("ai-train=yes,ai-input=no,  search=no"),
    "search=no, ai-input=no, ai-train=yes",
  );
  for (
    const bad of [
      "search=yes, ai-input=yes",
      "search=yes, ai-input=yes, ai-train=no, search=no",
      "search=yes, ai-input=yes, ai-train=No",
      "search=yes, ai-input=yes, ai-training=no",
      "search=yes; ai-input=yes; ai-train=no",
      "search=yes, ai-input=yes, ai-train=no\nUser-agent: *",
    ]
  ) {
    const errors = signal(bad);
    assert.ok(Array.isArray(errors) && errors.length === 1, bad);
    assert.match(errors[0]!, /^CONTENT_SIGNAL must give search, ai-input and ai-train each once/);
    assert.doesNotMatch(errors[0]!, /\n/);
  }
});

Deno.test("loadConfig() reads HEALTH_PORT: unset is no operator port; a port number apart from PORT", () => {
  assert.equal(configOf({}).healthPort, undefined);
  assert.equal(configOf({ HEALTH_PORT: " " }).healthPort, undefined);
  assert.equal(configOf({ HEALTH_PORT: "8081" }).healthPort, 8081);
  // Two free ports, chosen apart by the system.
  const twoFree = { PORT: "0", HEALTH_PORT: "0", PUBLIC_BASE_URL: "http://127.0.0.1" };
  assert.equal(configOf(twoFree).healthPort, 0);
  assert.match(errorsOf({ HEALTH_PORT: "livez" })[0]!, /^HEALTH_PORT must be a whole number/);
  assert.match(errorsOf({ HEALTH_PORT: "65536" })[0]!, /^HEALTH_PORT must be from 0 to 65535/);
  assert.deepEqual(errorsOf({ PORT: "9000", HEALTH_PORT: "9000" }), [
    "HEALTH_PORT must differ from PORT (both 9000): probes have a port of their own, never the public one, so set HEALTH_PORT to another port (e.g. 8081)",
  ]);
  // The default PORT counts too.
  assert.match(errorsOf({ HEALTH_PORT: "8000" })[0]!, /^HEALTH_PORT must differ from PORT/);
  // A PORT that is itself wrong is said once, not compared.
  assert.equal(errorsOf({ PORT: "x", HEALTH_PORT: "8000" }).length, 1);
});
