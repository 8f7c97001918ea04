/**
 * Stands for `@opentelemetry/api` in a test's import map: reports that it was loaded (a JSON line on
 * stderr, which `startService` keeps as an event), then is the package.
 *
 * @module
 */

// deno-lint-ignore no-console
console.error(JSON.stringify({ tripwire: "@opentelemetry/api" }));

export * from "npm:@opentelemetry/api@1.10.0";
