/**
 * Tests of configuration loading: defaults, every variable, and every problem reported at once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { formatConfigErrors, loadConfig, recordEnv } from "../lib/config.ts";

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
  ];
  for (const pattern of expected) {
    assert.ok(errors.some((e) => pattern.test(e)), `${pattern} in ${errors.join(" | ")}`);
  }
  assert.equal(errors.length, expected.length);
  const message = formatConfigErrors(errors);
  assert.match(message, /^Configuration is invalid \(9 problems\); nothing is served:/);
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
    'REDIS_URL has a user name or password with a malformed %-escape, got "redis://user%zz@127.0.0.1:6379"',
  ]);
  for (const url of ["redis://127.0.0.1:6379", "redis://127.0.0.1:6379/", "rediss://h:6380/3"]) {
    assert.equal(configOf({ ...redis, REDIS_URL: url }).redisUrl, url);
  }
});
