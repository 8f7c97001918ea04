/**
 * Credentials and `rediss://` on every Redis type, run for real: one server, a 6-node cluster and a
 * primary with a replica and three sentinels, each with a password (`requirepass`, `masterauth`,
 * the sentinels' `requirepass` and `auth-pass`) and TLS only (no plain port: clients, replication,
 * the cluster bus and the sentinels' links all speak TLS), with a throwaway CA made by `openssl` in
 * the test's temporary folder.
 *
 * Two real service processes per type trust that CA through `DENO_CERT` (what an operator with a
 * private CA sets; a managed service's public CA needs nothing) and take the password from
 * `REDIS_URL`: together they admit exactly the limit of 100 concurrent requests. A third, given a
 * wrong password, refuses to start, naming it.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  makeTestTls,
  redisUnavailableReason,
  startCluster,
  startRedis,
  startSentinel,
  type TestTls,
  tlsUnavailableReason,
} from "../../_redis.ts";
import { type ServiceProcess, startService } from "../../_service_process.ts";

const LIMIT = 60;
/** A password with characters a URL must escape, so the decoding is tested too. */
const PASSWORD = "s3cret/with space@and:colon";

const unavailable = redisUnavailableReason() ?? tlsUnavailableReason();
const ignored = unavailable ? ` (ignored: ${unavailable})` : "";

/** `url` with `password` in it, escaped as a URL requires. */
function withPassword(url: string, password: string): string {
  return url.replace("://", `://:${encodeURIComponent(password)}@`);
}

/** One service process on the Redis of `env`, trusting the test CA, failing closed. */
function service(env: Record<string, string>, tls: TestTls): Promise<ServiceProcess> {
  return startService({
    RATE_LIMIT: String(LIMIT),
    RATE_LIMIT_STORE: "redis",
    RATE_LIMIT_ON_STORE_ERROR: "closed",
    RATE_LIMIT_STORE_TIMEOUT_MS: "1500",
    TRUSTED_PROXIES: "127.0.0.1",
    DENO_CERT: tls.ca,
    ...env,
  });
}

/** The status and error code of one request of `caller`. */
async function send(instance: ServiceProcess, caller: string): Promise<string> {
  const response = await fetch(`${instance.url}/api/v1/platform`, {
    headers: { "x-forwarded-for": caller },
  });
  const body = await response.text();
  return response.status === 200 ? "200" : `${response.status} ${JSON.parse(body).error?.code}`;
}

/**
 * Two services on `env` admit exactly the limit of 100 concurrent requests of one caller; a third
 * with `wrongEnv` (a wrong password) refuses to start, naming it.
 */
async function assertCredentialsAndTls(
  env: Record<string, string>,
  wrongEnv: Record<string, string>,
  tls: TestTls,
): Promise<void> {
  const instances = await Promise.all([service(env, tls), service(env, tls)]);
  try {
    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, i) => send(instances[i % 2]!, "198.51.100.40")),
    );
    const tally: Record<string, number> = {};
    for (const a of answers) tally[a] = (tally[a] ?? 0) + 1;
    assert.deepEqual(tally, { "200": LIMIT, "429 rate_limited": 100 - LIMIT });
  } finally {
    await Promise.all(instances.map((instance) => instance.stop()));
  }
  // A wrong password is the operator's mistake, not an outage: start-up ends naming it. Start-up
  // waits for Redis's first answer at most the store timeout (1.5 s above) and then serves as in an
  // outage: the refusal is given 10 s to arrive (a busy machine once took longer than 1.5 s for the
  // TLS handshake and AUTH of a fresh process, and the service listened).
  await assert.rejects(
    service({ ...wrongEnv, RATE_LIMIT_STORE_TIMEOUT_MS: "10000" }, tls),
    /exited with 1 before listening:\n.*Redis refused the user name or password in REDIS_URL \(WRONGPASS\)/,
  );
}

Deno.test({
  name:
    `Redis credentials and rediss:// on one server, a cluster and Sentinel: two services share the limit, a wrong password stops start-up${ignored}`,
  ignore: unavailable !== undefined,
  async fn(t) {
    const dir = await Deno.makeTempDir({ prefix: "redis-tls-" });
    try {
      const tls = await makeTestTls(dir);

      await t.step("single", async () => {
        const redis = await startRedis({ password: PASSWORD, tls });
        try {
          await assertCredentialsAndTls(
            { REDIS_URL: withPassword(redis.url, PASSWORD) },
            { REDIS_URL: withPassword(redis.url, "wrong") },
            tls,
          );
        } finally {
          await redis.stop();
        }
      });

      await t.step("cluster (3 primaries, 3 replicas)", async () => {
        await using cluster = await startCluster({ password: PASSWORD, tls });
        const urls = (password: string) =>
          cluster.urls.map((url) => withPassword(url, password)).join(",");
        await assertCredentialsAndTls(
          { REDIS_TYPE: "cluster", REDIS_URL: urls(PASSWORD) },
          { REDIS_TYPE: "cluster", REDIS_URL: urls("wrong") },
          tls,
        );
      });

      await t.step("sentinel (a primary, a replica, three sentinels)", async () => {
        await using sentinel = await startSentinel({ password: PASSWORD, tls });
        const env = (password: string) => ({
          REDIS_TYPE: "sentinel",
          REDIS_URL: sentinel.urls.map((url) => withPassword(url, password)).join(","),
          REDIS_SENTINEL_MASTER: sentinel.name,
        });
        await assertCredentialsAndTls(env(PASSWORD), env("wrong"), tls);
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
