/**
 * Stands for `marked` in a test's import map: reports that it was loaded (a JSON line on stderr,
 * which `startService` keeps as an event), then is `marked`.
 *
 * @module
 */

// deno-lint-ignore no-console
console.error(JSON.stringify({ tripwire: "marked" }));

export * from "npm:marked@18.2.1";
