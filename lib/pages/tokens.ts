/**
 * Token counts of the Markdown the service sends (`x-markdown-tokens`, as Cloudflare's Markdown for
 * Agents sends it), so that an agent can budget its context before reading a body.
 *
 * Counted with `gpt-tokenizer`'s `o200k_base`: the encoding of OpenAI's current models (GPT-4o,
 * GPT-4.1, the o-series, GPT-5), exact for them and a close estimate for other models, whose
 * tokenizers are mostly not published. The older `cl100k_base` (GPT-4, GPT-3.5) counts more tokens
 * for the same text, and Cloudflare does not say which encoding its own count uses.
 *
 * The encoding is a 2.4 MB module: parsing it takes about a quarter of a second, and its ranks stay
 * in the heap that loaded it (about 38 MiB), where every later garbage collection would walk them
 * (measured: about 5% of the JSON requests per second with many callers). So it is loaded in a
 * worker, this very module started as one, which counts every text it is sent and is terminated
 * once none is waiting: the service's own heap never holds the tokenizer, and its event loop never
 * waits for the parse. Where a worker cannot start, the module is imported in process instead.
 * This module is imported when the first Markdown representation is built, by the warm-up (0.5 s
 * after start-up) or by a Markdown request before it, never before the first response
 * (lib/README.md, "Cold start"). Each body is counted once, when its representation is built.
 *
 * @module
 */

import { once } from "../once.ts";

/** The encoding the counts are in. */
export const TOKEN_ENCODING = "o200k_base";

/** Counts the tokens of a text. */
type TokenCounter = (text: string) => number;

/**
 * The counter in this thread: `gpt-tokenizer` imported once. Text that looks like a special token
 * (`<|endoftext|>`) is counted as the text it is, never refused: the content is the operator's and
 * agents read it as text.
 */
const inProcess = once(async (): Promise<TokenCounter> => {
  const { countTokens } = await import("gpt-tokenizer/encoding/o200k_base");
  const asText = { disallowedSpecial: new Set<string>() };
  return (text) => countTokens(text, asText);
});

/** A text sent to the worker and what its answer settles. */
interface Waiting {
  text: string;
  resolve: (count: number) => void;
  reject: (error: unknown) => void;
}

let worker: Worker | undefined;
let workerFailed = false;
const waiting = new Map<number, Waiting>();
let nextId = 0;

/**
 * The number of `o200k_base` tokens of `text`, counted in a worker (in process where none starts).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(await Promise.all([countTokens("hello world"), countTokens("<|endoftext|>")]), [2, 7]);
 * ```
 */
export function countTokens(text: string): Promise<number> {
  if (workerFailed) return inProcess().then((count) => count(text));
  const { promise, resolve, reject } = Promise.withResolvers<number>();
  const id = nextId++;
  waiting.set(id, { text, resolve, reject });
  try {
    (worker ??= startWorker()).postMessage({ id, text });
  } catch {
    countInProcess();
  }
  return promise;
}

/** This module as a worker, answering `{ id, count }` to each `{ id, text }`. */
function startWorker(): Worker {
  const started = new Worker(import.meta.url, { type: "module", name: "tokens" });
  started.onmessage = (event: MessageEvent<{ id: number; count?: number; error?: string }>) => {
    const { id, count, error } = event.data;
    const entry = waiting.get(id);
    waiting.delete(id);
    if (count !== undefined) entry?.resolve(count);
    else entry?.reject(new Error(`the tokenizer failed: ${error}`));
    // Nothing more to count: give its memory back (a later text starts another).
    if (waiting.size === 0 && worker === started) {
      started.terminate();
      worker = undefined;
    }
  };
  started.onerror = (event) => {
    event.preventDefault();
    countInProcess();
  };
  return started;
}

/** The worker could not start or failed: count what waits, and what comes, in process. */
function countInProcess(): void {
  workerFailed = true;
  worker?.terminate();
  worker = undefined;
  const entries = [...waiting.values()];
  waiting.clear();
  void inProcess().then(
    (count) => entries.forEach((entry) => entry.resolve(count(entry.text))),
    (error) => entries.forEach((entry) => entry.reject(error)),
  );
}

/** In the worker: count each text the service sends. */
function serveAsWorker(scope: {
  onmessage: ((event: MessageEvent<{ id: number; text: string }>) => void) | null;
  postMessage: (message: unknown) => void;
}): void {
  scope.onmessage = async ({ data: { id, text } }) => {
    try {
      scope.postMessage({ id, count: (await inProcess())(text) });
    } catch (error) {
      scope.postMessage({ id, error: error instanceof Error ? error.message : String(error) });
    }
  };
}

if ("WorkerGlobalScope" in globalThis) {
  serveAsWorker(globalThis as unknown as Parameters<typeof serveAsWorker>[0]);
}
