/**
 * The npm packages Node's entry imports, checked before anything starts: without `npm ci` they are
 * missing, and each path that needs one would fail on its first request (a stack per module, then
 * 24 of 54 variants served). The packages are those package.json depends on, so the list is what
 * `npm ci` installs, named once.
 *
 * @module
 */

import { readFileSync } from "node:fs";

/** The project's package.json, beside `lib/`. */
const PACKAGE_JSON = new URL("../../package.json", import.meta.url);

/**
 * The dependencies of package.json that `resolve` cannot find (Node's resolution from this module,
 * by default).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(missingPackages(() => "file:///found.js"), []);
 * const missing = missingPackages((name) => {
 *   if (name === "marked") throw new Error("Cannot find package 'marked'");
 *   return "file:///found.js";
 * });
 * assert.deepEqual(missing, ["marked"]);
 * ```
 */
export function missingPackages(
  resolve: (name: string) => string = (name) => import.meta.resolve(name),
): string[] {
  const { dependencies } = JSON.parse(readFileSync(PACKAGE_JSON, "utf8")) as {
    dependencies?: Record<string, string>;
  };
  return Object.keys(dependencies ?? {}).filter((name) => {
    try {
      resolve(name);
      return false;
    } catch {
      return true;
    }
  });
}

/**
 * The sentence of a start without the packages.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.match(missingPackagesSentence(["marked", "negotiator"]), /run npm ci/);
 * ```
 */
export function missingPackagesSentence(missing: readonly string[]): string {
  return `Cannot start: the npm packages ${
    missing.join(", ")
  } are not installed, so run npm ci in the project's folder first (npm ci --omit=dev on a server); nothing is served.`;
}
