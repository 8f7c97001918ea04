/**
 * fast-check as the tests run on Node see it (`_deno_test_on_node.ts` maps `npm:fast-check` here):
 * the same package, each property run a tenth as many times. Deno's run explores them in full;
 * Node's shows the same code answers the same on another runtime, within the suite's time.
 *
 * @module
 */

import fc from "fast-check";

/** The share of a property's runs made on Node. */
const SHARE = 0.1;

/** `fc.assert` with a tenth of the runs (at least 10). */
function assert(...args: Parameters<typeof fc.assert>): ReturnType<typeof fc.assert> {
  const [property, params] = args;
  const numRuns = Math.max(10, Math.ceil((params?.numRuns ?? 100) * SHARE));
  return fc.assert(property, { ...params, numRuns } as typeof params);
}

export default { ...fc, assert };
