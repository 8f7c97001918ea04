/**
 * The token counts (`lib/pages/tokens.ts`) against `gpt-tokenizer`'s own `countTokens`: every
 * Markdown body the service sends (pages, twins, the Platform, llms.txt, the Markdown 404) under
 * two configurations, text made to stress the split and the merge, and the build's module
 * (`dist/tokens/o200k_ranks.js`) against the ranks packed from the package.
 *
 * @module
 */

import assert from "node:assert/strict";
import { countTokens as referenceCount } from "npm:gpt-tokenizer@4.0.0/encoding/o200k_base";
import bpe from "npm:gpt-tokenizer@4.0.0/bpeRanks/o200k_base";
import { O200K_TOKEN_SPLIT_REGEX } from "npm:gpt-tokenizer@4.0.0/encodingParams/constants";
import { createHandler } from "../../lib/handler.ts";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";
import { policyOf } from "../../lib/limit/core/decision.ts";
import { countTokens } from "../../lib/pages/tokens.ts";
import { tokenCounter } from "../../lib/pages/tokens/bpe.ts";
import {
  defaultMarkdownBodies,
  o200kFile,
  o200kKnown,
  o200kModule,
  o200kPacked,
} from "../../lib/build/tokens.ts";
import { fileReader, openAhead } from "../../lib/server/token_ranks.ts";
import { O200K_ASCII_SPLIT, O200K_SPLIT } from "../../lib/pages/tokens/split.ts";
import { bytesOf } from "../../lib/pages/tokens/module.ts";
import {
  checkRanks,
  indexedForm,
  indexRanks,
  knownCounts,
  memoryReader,
  packRanks,
  PIECEMEAL_READS,
  rankTable,
  readIndexedForm,
} from "../../lib/pages/tokens/ranks.ts";
import { type EnvRecord, testConfig, testContent } from "../_server.ts";

/** `gpt-tokenizer`'s count, special-looking text counted as text (as the service counts it). */
function reference(text: string): number {
  return referenceCount(text, { disallowedSpecial: new Set() });
}

/** Every request whose answer is Markdown (or llms.txt), with the `Accept` that selects it. */
const MARKDOWN_REQUESTS: ReadonlyArray<[path: string, accept: string]> = [
  ["/index.html.md", "*/*"],
  ["/developers.md", "*/*"],
  ["/api.md", "*/*"],
  ["/developers/deprecation-policy.md", "*/*"],
  ["/llms.txt", "*/*"],
  ["/", "text/markdown"],
  ["/developers", "text/markdown"],
  ["/api", "text/markdown"],
  ["/developers/deprecation-policy", "text/markdown"],
  ["/api/v1/platform", "text/markdown"],
  ["/no/such/page", "text/markdown"],
];

/**
 * Two configurations: the defaults, and one whose every text lands in a body with letters of other
 * scripts, digits, emoji, an apostrophe and special-token lookalikes (chunks no default body holds).
 */
const CONFIGURATIONS: ReadonlyArray<[name: string, env: EnvRecord]> = [
  ["the defaults", {}],
  ["other scripts, emoji and special-token lookalikes", {
    PUBLIC_BASE_URL: "https://api.strasse-42.example:8443/discovery/v2",
    PRODUCT_NAME: "Ünïcode Lëgal 法律 🚀 <|endoftext|>",
    PRODUCT_DESCRIPTION:
      "Rechtsprechung & Gesetze — 判例と法令の検索; it's 12345678 times faster. Ωμέγα! 👩‍⚖️",
    SUPPORT_EMAIL: "hilfe+agents@strasse-42.example",
    SUPPORT_URL: "https://support.strasse-42.example/hilfe",
    DOCUMENTATION_URL: "https://docs.strasse-42.example/ueber",
    RATE_LIMIT: "7777",
    RATE_LIMIT_WINDOW_SECONDS: "90",
  }],
];

for (const [name, env] of CONFIGURATIONS) {
  Deno.test(`x-markdown-tokens equals gpt-tokenizer's count for every Markdown body, llms.txt and the Markdown 404, with ${name}`, async () => {
    const config = testConfig({ RATE_LIMIT: "1000", ...env });
    const store = new MemoryStore(policyOf(config), { maxCallers: 100, sweep: false });
    const handler = createHandler({ config, content: testContent(config), store });
    const info = { remoteAddr: { transport: "tcp", hostname: "127.0.0.1", port: 1 } } as const;
    try {
      for (const [path, accept] of MARKDOWN_REQUESTS) {
        const request = new Request(`http://127.0.0.1${path}`, { headers: { accept } });
        const response = await handler(request, info as Deno.ServeHandlerInfo<Deno.NetAddr>);
        const body = await response.text();
        assert.match(response.headers.get("content-type") ?? "", /^text\/(markdown|plain)/, path);
        const tokens = response.headers.get("x-markdown-tokens");
        assert.equal(tokens, String(reference(body)), `${path}: ${body.slice(0, 80)}`);
      }
    } finally {
      await store.close();
    }
  });
}

/** A generator of pseudo-random numbers in [0, 1) from `seed` (mulberry32): the same text each run. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Pieces that reach every branch of the split pattern and the merge: letters of each case and
 * script, combining marks, contractions, digits, punctuation runs before new lines and `/`,
 * whitespace runs, emoji, bytes that are no text (lone surrogates), special-token lookalikes.
 */
const PIECES = [
  "a",
  "The",
  "HTTP",
  "camelCase",
  "É",
  "é",
  "ß",
  "straße",
  "ǅ",
  "ʰ",
  "法律",
  "の",
  "한국어",
  "Ωμέγα",
  "кириллица",
  "עברית",
  "عربى",
  "हिन्दी",
  "e\u0301",
  "'s",
  "'LL",
  "'re",
  "don't",
  "0",
  "42",
  "1234567",
  "٣",
  "Ⅻ",
  " ",
  "  ",
  "\t",
  "\n",
  "\r\n",
  " \n\n",
  "   ",
  "\u00a0",
  "\u3000",
  ".",
  "...",
  "—",
  "/",
  "//",
  "://",
  "!?",
  "`",
  "```",
  "#",
  "##",
  "- ",
  "|",
  "{}",
  "<|endoftext|>",
  "<|fim_prefix|>",
  "😀",
  "👩‍⚖️",
  "🇩🇪",
  "\ud800",
  "\udfff",
  "\u0000",
  "\ufffd",
  "\ufeff",
  "aaaaaaaaaaaaaaaa",
  "https://example.com/a_b?c=d",
  "x@example.com",
];

/** `count` against gpt-tokenizer on `n` texts of random {@linkcode PIECES}. */
function assertCountsStressTexts(count: (text: string) => number, n: number): void {
  const next = random(40);
  for (let i = 0; i < n; i++) {
    let text = "";
    const pieces = 1 + Math.floor(next() * 24);
    for (let j = 0; j < pieces; j++) text += PIECES[Math.floor(next() * PIECES.length)];
    assert.equal(count(text), reference(text), JSON.stringify(text));
  }
  assert.equal(count(""), 0);
}

Deno.test("the packed counter equals gpt-tokenizer's countTokens on 3000 texts made to stress the split and the merge", () => {
  assertCountsStressTexts(
    tokenCounter(rankTable(indexRanks(packRanks(bpe))), O200K_TOKEN_SPLIT_REGEX),
    3000,
  );
});

Deno.test("the counter over the build's file read piece by piece (read ahead or not) equals gpt-tokenizer's count, with the build's known counts and without", async () => {
  const packed = o200kPacked();
  const known = o200kKnown(packed);
  const dir = await Deno.makeTempDir();
  const file = new URL(`file://${dir}/o200k_ranks.bin`);
  await Deno.writeFile(file, o200kFile(packed, known));
  try {
    // Read as the first count finds it (opened and read ahead as the service starts), and as later
    // counts open it.
    for (const [withKnown, open] of [[true, openAhead], [false, fileReader]] as const) {
      const reader = (await open(file))!;
      try {
        const form = readIndexedForm(reader);
        const read = knownCounts(form.known);
        assert.ok([...known].every(([chunk, count]) => read.get(chunk) === count));
        const count = tokenCounter(form.table, form.split, withKnown ? known : new Map());
        for (const body of defaultMarkdownBodies()) assert.equal(count(body), reference(body));
        assertCountsStressTexts(count, withKnown ? 300 : 1000);
      } finally {
        reader.close();
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  assert.equal(fileReader(file), undefined, "a missing file: no reader");
  // A form cut short, and a reader that reaches the start and the end but cannot seek between.
  const form = o200kFile(packed, known);
  assert.throws(
    () => readIndexedForm(memoryReader(form.subarray(0, form.length - 100))),
    /not as long as said|not an indexed form/,
  );
  const ends = memoryReader(form);
  const noSeek = {
    read: (at: number, length: number) =>
      at < 4096 || at + length > form.length - 65_536 ? ends.read(at, length) : new Uint8Array(0),
    close: () => {},
  };
  assert.throws(() => readIndexedForm(noSeek), /not as long as said/);
  // A table with no empty slot (a hostile file): the probe ends, with an error, not a hang.
  const toy = indexedForm(indexRanks(packRanks(["a", "b", "ab"])), /[ab]+/gu);
  const slots = readIndexedForm(memoryReader(toy));
  assert.equal(slots.table.rankOf(new TextEncoder().encode("c"), 0, 1), -1);
  const header = new Uint32Array(toy.buffer, 0, 6);
  const slotsAt = 24 + Math.ceil(header[4]! / 4) * 4 + 4 * (header[1]! + 1);
  new Uint32Array(toy.buffer, slotsAt, header[2]!).fill(1);
  assert.throws(
    () => readIndexedForm(memoryReader(toy)).table.rankOf(new TextEncoder().encode("c"), 0, 1),
    /no empty slot/,
  );
  assert.throws(
    () => readIndexedForm(memoryReader(new Uint8Array(64))),
    /not an indexed form of ranks of this version/,
  );
});

Deno.test("a long text the build never saw is looked up piece by piece, then in the form read whole at once", () => {
  const form = o200kFile();
  const memory = memoryReader(form);
  let reads = 0;
  let whole = 0;
  const reader = {
    read(at: number, length: number) {
      reads++;
      if (length > 1_000_000) whole++;
      return memory.read(at, length);
    },
    close: () => {},
  };
  const { table, split } = readIndexedForm(reader);
  const count = tokenCounter(table, split);
  let text = "";
  const next = random(3);
  for (let i = 0; i < 2000; i++) text += PIECES[Math.floor(next() * PIECES.length)];
  assert.equal(count(text), reference(text));
  assert.equal(whole, 1, "the form read whole once");
  assert.ok(reads < PIECEMEAL_READS + 50, `${reads} reads`);
});

Deno.test("the build's known counts cover every chunk of the default bodies, and a count known is taken, not merged again", () => {
  const table = rankTable(indexRanks(o200kPacked()));
  const known = o200kKnown();
  // The default bodies are counted without a single lookup of the ranks.
  let lookups = 0;
  const counting = {
    rankOf: (bytes: Uint8Array, start: number, end: number) => {
      lookups++;
      return table.rankOf(bytes, start, end);
    },
  };
  for (const each of defaultMarkdownBodies()) {
    assert.equal(tokenCounter(counting, O200K_SPLIT, known)(each), reference(each));
  }
  assert.equal(lookups, 0);
  const body = defaultMarkdownBodies()[0]!;
  const chunks = [...body.matchAll(O200K_TOKEN_SPLIT_REGEX)].map(([chunk]) => chunk);
  const count = tokenCounter(table, O200K_SPLIT);
  const tampered = new Map(known).set(chunks[0]!, known.get(chunks[0]!)! + 1000);
  assert.equal(tokenCounter(table, O200K_SPLIT, tampered)(body), count(body) + 1000);
});

Deno.test("O200K_SPLIT is gpt-tokenizer's pattern, and its ASCII form finds the same chunks in ASCII text", () => {
  assert.equal(O200K_SPLIT.source, O200K_TOKEN_SPLIT_REGEX.source);
  assert.equal(O200K_SPLIT.flags, O200K_TOKEN_SPLIT_REGEX.flags);
  const ascii = new RegExp(O200K_ASCII_SPLIT.source, O200K_ASCII_SPLIT.flags);
  const chunks = (text: string, split: RegExp) =>
    [...text.matchAll(split)].map((found) => `${found.index}:${found[0]}`);
  // Every ASCII character, the classes' edges and the pattern's own characters weighted up.
  const alphabet = [
    ...Array.from({ length: 128 }, (_, code) => String.fromCharCode(code)),
    ..."AZaz09@[`{/:' \t\n\r".split(""),
    " ",
    " ",
    "\n",
    "'",
    "s",
    "L",
    "l",
    "'s",
    "'LL",
    "'ve",
    "\r\n",
    "  \n",
  ];
  const next = random(7);
  for (let i = 0; i < 20_000; i++) {
    let text = "";
    const length = Math.floor(next() * 40);
    for (let j = 0; j < length; j++) text += alphabet[Math.floor(next() * alphabet.length)];
    assert.deepEqual(
      chunks(text, ascii),
      chunks(text, O200K_TOKEN_SPLIT_REGEX),
      JSON.stringify(text),
    );
  }
  for (const body of defaultMarkdownBodies()) {
    assert.deepEqual(chunks(body, ascii), chunks(body, O200K_TOKEN_SPLIT_REGEX));
  }
});

Deno.test("checkRanks() accepts gpt-tokenizer's o200k_base ranks and refuses ranks its lookup would not all find", () => {
  checkRanks(bpe);
  assert.throws(() => checkRanks(["a", "b", "a"]), /rank 2 repeats an earlier rank's text/);
  assert.throws(() => checkRanks([[0xff], [0xff]]), /rank 1 repeats an earlier rank's bytes/);
  assert.throws(() => checkRanks(["\ud800"]), /rank 0 is not well-formed text/);
});

Deno.test("the build's module and file carry exactly the ranks packed from gpt-tokenizer, and count alike", async () => {
  const packed = o200kPacked();
  const indexed = indexRanks(packed);
  const known = o200kKnown(packed);
  const form = readIndexedForm(memoryReader(o200kFile(packed, known)));
  assert.equal(form.split.source, O200K_TOKEN_SPLIT_REGEX.source);
  assert.equal(form.split.flags, O200K_TOKEN_SPLIT_REGEX.flags);
  // Every rank with bytes of its own is found by them, in the file as in the ranks packed.
  for (let rank = 0; rank < indexed.offsets.length - 1; rank++) {
    const [start, end] = [indexed.offsets[rank]!, indexed.offsets[rank + 1]!];
    if (start === end) continue;
    assert.equal(form.table.rankOf(packed, start, end), rank);
  }
  const dir = await Deno.makeTempDir();
  try {
    const file = `${dir}/o200k_ranks.js`;
    await Deno.writeTextFile(file, o200kModule(packed, known));
    const built = await import(new URL(`file://${file}`).href);
    assert.equal(built.ENCODING, "o200k_base");
    assert.deepEqual(bytesOf(built.RANKS), packed);
    assert.equal(built.SPLIT, O200K_TOKEN_SPLIT_REGEX.source);
    assert.equal(built.SPLIT_FLAGS, O200K_TOKEN_SPLIT_REGEX.flags);
    assert.equal(built.KNOWN, form.known);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  const text = "Ünïcode 法律 🚀 <|endoftext|> it's 1234567 — https://example.com/a_b\n\n";
  assert.equal(tokenCounter(form.table, form.split)(text), reference(text));
  // The seam, from whichever ranks this checkout has (the build's, else the package's).
  assert.equal(await countTokens(text), reference(text));
});
