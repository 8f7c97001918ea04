/**
 * The variables Deno Deploy predefines for an app (its documentation's "Predefined environment
 * variables"), for tests that configure or run the service as the platform does: app `discovery` of
 * organisation `acme`, production timeline.
 *
 * @module
 */

/** What Deploy sets in every context; `DENO_TRUST_PROXY_HEADERS` passes the client address through. */
export const DEPLOY_PLATFORM: Readonly<Record<string, string>> = {
  DENO_DEPLOY: "true",
  DENO_DEPLOY_ORG_ID: "0e9b3b5a-7a55-4bd5-9b5b-5d3f0c7f4a11",
  DENO_DEPLOY_ORG_SLUG: "acme",
  DENO_DEPLOY_APP_ID: "4a0c4a1e-0c5e-4c43-9f7e-2f9f3f0b2b22",
  DENO_DEPLOY_APP_SLUG: "discovery",
  DENO_DEPLOY_BUILD_ID: "b1",
  DENO_DEPLOYMENT_ID: "d1",
  DENO_TIMELINE: "production",
  DENO_TRUST_PROXY_HEADERS: "1",
};
