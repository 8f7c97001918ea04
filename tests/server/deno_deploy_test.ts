/**
 * Tests of the Deno Deploy defaults: the platform is recognised by `DENO_DEPLOY=true` only, the
 * timeline's documented URL becomes the public base URL, and the address is never read there.
 *
 * @module
 */

import assert from "node:assert/strict";
import { DEPLOY_PLATFORM } from "../_deno_deploy_env.ts";
import { loadConfig } from "../../lib/config/config.ts";
import {
  DEPLOY_STORE_TIMEOUT_MS,
  deployEnv,
  deployUrl,
  onDenoDeploy,
} from "../../lib/server/deno_deploy.ts";

function reader(record: Record<string, string>): (name: string) => string | undefined {
  return (name) => record[name];
}

Deno.test("onDenoDeploy() is true only for DENO_DEPLOY=true", () => {
  assert.equal(onDenoDeploy(reader({ DENO_DEPLOY: "true" })), true);
  for (const value of ["", "1", "false", "TRUE"]) {
    assert.equal(onDenoDeploy(reader({ DENO_DEPLOY: value })), false, value);
  }
  assert.equal(onDenoDeploy(reader({})), false);
});

Deno.test("deployUrl() gives each timeline's documented deno.net URL", () => {
  const cases: [string, string | undefined][] = [
    ["production", "https://discovery.acme.deno.net"],
    ["git-branch/staging", "https://discovery--staging.acme.deno.net"],
    ["preview/1a2b3c", "https://discovery-1a2b3c.acme.deno.net"],
    // A branch name that is no DNS label, or a timeline this service does not know: not guessed.
    ["git-branch/feature/x", undefined],
    ["git-branch/Upper_Case", undefined],
    ["somewhere-else", undefined],
    ["", undefined],
  ];
  for (const [timeline, url] of cases) {
    assert.equal(deployUrl(reader({ ...DEPLOY_PLATFORM, DENO_TIMELINE: timeline })), url, timeline);
  }
  assert.equal(deployUrl(reader({ ...DEPLOY_PLATFORM, DENO_DEPLOY_ORG_SLUG: "" })), undefined);
});

Deno.test("deployEnv() leaves the environment alone off Deno Deploy", () => {
  const env = { PORT: "9000", HOSTNAME: "127.0.0.1" };
  const result = deployEnv(reader(env));
  assert.deepEqual(result.errors, []);
  assert.equal(result.derivedBaseUrl, undefined);
  const loaded = loadConfig(result.env);
  assert.ok(loaded.ok);
  assert.equal(loaded.config.port, 9000);
  assert.equal(loaded.config.baseUrl, "http://localhost:9000");
  assert.equal(loaded.config.rateLimitStoreTimeoutMs, 100);
});

Deno.test("on Deno Deploy, links name the timeline's URL, the address is the platform's, and the store timeout fits a cross-region round trip", () => {
  // A container-style HOSTNAME that would not validate, and a PORT: neither is read on Deploy.
  const result = deployEnv(
    reader({ ...DEPLOY_PLATFORM, HOSTNAME: "ip-10-0-0-1_internal", PORT: "x" }),
  );
  assert.deepEqual(result.errors, []);
  assert.equal(result.derivedBaseUrl, "https://discovery.acme.deno.net");
  const loaded = loadConfig(result.env);
  if (!loaded.ok) assert.fail(loaded.errors.join("\n"));
  assert.equal(loaded.config.baseUrl, "https://discovery.acme.deno.net");
  assert.equal(loaded.config.openapiUrl, "https://discovery.acme.deno.net/openapi.json");
  assert.equal(loaded.config.hostname, "0.0.0.0");
  assert.equal(loaded.config.rateLimitStoreTimeoutMs, DEPLOY_STORE_TIMEOUT_MS);
});

Deno.test("on Deno Deploy the shared store is local-first unless the operator chooses exact", () => {
  const deployed = loadConfig(deployEnv(reader(DEPLOY_PLATFORM)).env);
  if (!deployed.ok) assert.fail(deployed.errors.join("\n"));
  assert.equal(deployed.config.rateLimitConsistency, "local-first");
  const chosen = loadConfig(
    deployEnv(reader({ ...DEPLOY_PLATFORM, RATE_LIMIT_CONSISTENCY: "exact" })).env,
  );
  if (!chosen.ok) assert.fail(chosen.errors.join("\n"));
  assert.equal(chosen.config.rateLimitConsistency, "exact");
  const local = loadConfig(deployEnv(reader({})).env);
  if (!local.ok) assert.fail(local.errors.join("\n"));
  assert.equal(local.config.rateLimitConsistency, "exact", "off Deploy the default stays exact");
});

Deno.test("on Deno Deploy, what the operator sets wins over the platform's defaults", () => {
  const result = deployEnv(reader({
    ...DEPLOY_PLATFORM,
    PUBLIC_BASE_URL: "https://api.example.com",
    RATE_LIMIT_STORE_TIMEOUT_MS: "250",
  }));
  assert.deepEqual(result.errors, []);
  assert.equal(result.derivedBaseUrl, undefined);
  const loaded = loadConfig(result.env);
  if (!loaded.ok) assert.fail(loaded.errors.join("\n"));
  assert.equal(loaded.config.baseUrl, "https://api.example.com");
  assert.equal(loaded.config.rateLimitStoreTimeoutMs, 250);
});

Deno.test("on Deno Deploy, a public base URL that cannot be derived stops start-up with one sentence naming PUBLIC_BASE_URL", () => {
  const result = deployEnv(reader({ ...DEPLOY_PLATFORM, DENO_TIMELINE: "git-branch/feature/x" }));
  assert.equal(result.errors.length, 1);
  assert.match(result.errors[0]!, /^PUBLIC_BASE_URL must be set on Deno Deploy .*: set it to /);
  assert.doesNotMatch(result.errors[0]!, /\n/);
  // Never localhost in production: the derived default is absent, not http://localhost:8000.
  assert.equal(result.env("PUBLIC_BASE_URL"), undefined);
});
