/**
 * Tests of the warm-up on a small route table: every representation and its two compressed codings
 * are built, a failing one is reported and the rest still built, and an abort stops it. (The
 * handler's tests check that warmed answers equal those built by the first request.)
 *
 * @module
 */

import assert from "node:assert/strict";
import { buildRepresentation, type Representation } from "../lib/http/representation.ts";
import { warmUp } from "../lib/warm_up.ts";
import { loadConfig } from "../lib/config/config.ts";
import { recordEnv } from "../lib/config/env.ts";
import { negotiatorLoaded } from "../lib/http/negotiate.ts";
import { loadContent } from "../lib/pages/content.ts";
import { buildAnswers } from "../lib/respond/paths.ts";
import { DISK_STATIC_FILES } from "../lib/server/static_files.ts";

const BODY = "x".repeat(2_000);

function route(representations: () => Representation[]) {
  return { representations, prepare: () => Promise.resolve() };
}

Deno.test("warmUp() builds every representation and both compressed codings, and reports the count", async () => {
  const built = [
    await buildRepresentation("text/plain; charset=utf-8", BODY),
    await buildRepresentation("text/plain; charset=utf-8", BODY + "y"),
  ];
  const { promise, resolve } = Promise.withResolvers<{ variants: number; ms: number }>();
  warmUp([route(() => built)], { delayMs: 0, onDone: resolve });
  const report = await promise;
  assert.equal(report.variants, 6); // two representations, each in identity, br and gzip
  for (const representation of built) {
    assert.ok(representation.variants.br!.body.length < BODY.length);
    assert.ok(representation.variants.gzip!.body.length < BODY.length);
  }
});

Deno.test("warmUp() reports a representation that fails and goes on with the next route", async () => {
  const errors: unknown[] = [];
  const { promise, resolve } = Promise.withResolvers<{ variants: number; ms: number }>();
  const broken = route(() => {
    throw new Error("no such file");
  });
  const built = await buildRepresentation("text/plain; charset=utf-8", BODY);
  const fine = route(() => [built]);
  warmUp([broken, fine], { delayMs: 0, onDone: resolve, onError: (e) => errors.push(e) });
  assert.equal((await promise).variants, 3);
  assert.equal(errors.length, 1);
});

Deno.test("warmUp() reports a path whose representations cannot be built, and compresses the others", async () => {
  const errors: unknown[] = [];
  const built = await buildRepresentation("text/plain; charset=utf-8", BODY);
  const broken = {
    representations: () => [],
    prepare: () => Promise.reject(new Error("no such file")),
  };
  const { promise, resolve } = Promise.withResolvers<{ variants: number; ms: number }>();
  warmUp([broken, route(() => [built])], { onDone: resolve, onError: (e) => errors.push(e) });
  assert.equal((await promise).variants, 3);
  assert.equal(errors.length, 1);
});

Deno.test("warmUp() stops once its signal is aborted and never reports done", async () => {
  const stop = new AbortController();
  let done = false;
  let steps = 0;
  const counted = route(() => {
    steps++;
    stop.abort();
    return [];
  });
  warmUp([counted, counted], { delayMs: 0, signal: stop.signal, onDone: () => done = true });
  // The warm-up takes one step per macrotask: after several, a second step would have run.
  for (let turn = 0; turn < 5; turn++) await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(steps, 1);
  assert.equal(done, false);
});

// negotiator is CommonJS: loading it brings Node compatibility, megabytes resident for the life of a
// process that may never see an Accept value it is needed for (tests/bench/README.md, "The hot
// caller and memory").
Deno.test("warmUp() over the service's routes compresses every representation without loading negotiator", async () => {
  const loaded = loadConfig(recordEnv({}));
  assert.ok(loaded.ok);
  const content = loadContent(loaded.config, DISK_STATIC_FILES);
  assert.ok(content.ok);
  const routes = [...buildAnswers(loaded.config, content.content).paths.values()];
  const { promise, resolve } = Promise.withResolvers<{ variants: number; ms: number }>();
  warmUp(routes, { delayMs: 0, onDone: resolve, onError: (error) => assert.fail(String(error)) });
  const report = await promise;
  const representations = routes.flatMap((route) => route.representations());
  assert.equal(report.variants, representations.length * 3);
  for (const representation of representations) {
    assert.ok(representation.variants.br !== undefined, representation.type);
    assert.ok(representation.variants.gzip !== undefined, representation.type);
  }
  assert.equal(negotiatorLoaded(), false);
});
