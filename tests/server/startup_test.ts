/**
 * Tests of the start-up sentences for a Deno KV database that cannot be opened: each names what to
 * do, in one line. (The other sentences are tested through main.ts as a process in main_test.ts.)
 *
 * @module
 */

import assert from "node:assert/strict";
import { explainKvError } from "../../lib/server/startup.ts";

Deno.test("explainKvError() on Deno Deploy with no KV_PATH says to attach a database or use memory", () => {
  const sentence = explainKvError(new Error("database not found"), undefined, {
    onDenoDeploy: true,
  });
  assert.equal(
    sentence,
    "Cannot open the default Deno KV database: database not found, so attach a Deno KV database to the app (Databases, Assign) or set RATE_LIMIT_STORE=memory; nothing is served.",
  );
});

Deno.test("explainKvError() off Deno Deploy points at KV_PATH", () => {
  const sentence = explainKvError(new Error("database not found"), undefined);
  assert.match(sentence, /^Cannot open the default Deno KV database: .*check KV_PATH; nothing/);
  assert.doesNotMatch(sentence, /\n/);
});

Deno.test("explainKvError() names --unstable-kv when the runtime has no Deno.openKv", () => {
  const sentence = explainKvError(
    new TypeError("Deno.openKv is not a function"),
    "/var/lib/discovery/limits.sqlite3",
    { kvEnabled: false },
  );
  assert.match(sentence, /^Cannot open KV_PATH \/var\/lib\/discovery\/limits\.sqlite3: /);
  assert.match(sentence, /Deno KV is not enabled in this runtime, so run with --unstable-kv/);
});
