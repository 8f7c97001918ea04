/**
 * The operator controls' checks as each way the service ships runs them (`deno task start`,
 * `deno serve`, Deno Deploy, the VM recipe, the Worker on workerd): one exempt, one ordinary and one
 * denied caller against a live URL, at the default limit of 60. Each caller is named by `as`, the
 * way its platform names a client (`X-Forwarded-For` from a trusted proxy, `x-deno-client-address`,
 * `CF-Connecting-IP`).
 *
 * @module
 */

import assert from "node:assert/strict";

/** The exempt caller of {@linkcode checkControls}: in `RATE_LIMIT_EXEMPT=192.0.2.0/24`. */
export const EXEMPT_CALLER = "192.0.2.7";
/** The denied caller: `RATE_LIMIT_DENY=203.0.113.66`. */
export const DENIED_CALLER = "203.0.113.66";
/** The controls {@linkcode checkControls} expects. */
export const CONTROLS_ENV = {
  RATE_LIMIT_EXEMPT: "192.0.2.0/24",
  RATE_LIMIT_DENY: DENIED_CALLER,
} as const;

/** What a request answered: status, `RateLimit`, `Retry-After`, and the error code if any. */
interface Answer {
  status: number;
  ratelimit: string | null;
  retryAfter: string | null;
  code: string | undefined;
}

async function ask(url: string, headers: Record<string, string>, path = "/api/v1/platform") {
  const response = await fetch(`${url}${path}`, { headers });
  const text = await response.text();
  const answer: Answer = {
    status: response.status,
    ratelimit: response.headers.get("ratelimit"),
    retryAfter: response.headers.get("retry-after"),
    code: response.status >= 400 ? JSON.parse(text).error?.code : undefined,
  };
  return answer;
}

/**
 * The exempt caller's 200 requests are all 200, `r` counting down to 0 and no `Retry-After`; an
 * ordinary caller's 100 admit 60 (`admittedRange` for a limit shared loosely across instances);
 * the denied caller gets 403 `forbidden` with the fields on three paths.
 */
export async function checkControls(
  url: string,
  as: (address: string) => Record<string, string>,
  admittedRange: [number, number] = [60, 60],
): Promise<void> {
  const exempt: Answer[] = [];
  for (let i = 0; i < 200; i++) exempt.push(await ask(url, as(EXEMPT_CALLER)));
  assert.equal(exempt.filter((a) => a.status === 200).length, 200, "the exempt caller: 200 of 200");
  assert.ok(exempt.every((a) => a.retryAfter === null), "no Retry-After for the exempt caller");
  assert.match(exempt[0]!.ratelimit ?? "", /^"default";r=59;t=\d+$/);
  assert.match(exempt[199]!.ratelimit ?? "", /^"default";r=0;t=[1-9]\d*$/);
  let admitted = 0;
  for (let i = 0; i < 100; i++) {
    const answer = await ask(url, as("198.51.100.44"));
    if (answer.status === 200) admitted++;
    else assert.equal(answer.code, "rate_limited");
  }
  assert.ok(
    admitted >= admittedRange[0] && admitted <= admittedRange[1],
    `the ordinary caller: ${admitted} of 100 admitted`,
  );
  for (const path of ["/api/v1/platform", "/", "/no/such/path"]) {
    const denied = await ask(url, as(DENIED_CALLER), path);
    assert.equal(denied.status, 403, path);
    assert.equal(denied.code, "forbidden", path);
    assert.match(denied.ratelimit ?? "", /^"default";r=0;t=60$/, path);
    assert.equal(denied.retryAfter, null, path);
  }
}

/**
 * Under `RATE_LIMIT_MODE=report`: 100 requests of one caller are all 200, the last 40 with `r=0` and
 * none with `Retry-After`.
 */
export async function checkReportMode(
  url: string,
  as: (address: string) => Record<string, string>,
): Promise<void> {
  const answers: Answer[] = [];
  for (let i = 0; i < 100; i++) answers.push(await ask(url, as("198.51.100.45")));
  assert.deepEqual(new Set(answers.map((a) => a.status)), new Set([200]));
  assert.ok(answers.slice(60).every((a) => /;r=0;/.test(a.ratelimit ?? "")), "the last 40: r=0");
  assert.ok(answers.every((a) => a.retryAfter === null), "no Retry-After");
}
