/**
 * The token ranks' file as Deno reads it (`lib/server/token_ranks.ts`), under what can happen to a
 * file: rewritten under a running service by a build, cut. A count never comes out wrong: it is
 * made from the file, or from the package's ranks when the file fails under it.
 *
 * Its own file: the counter of `lib/pages/tokens.ts` is the module's, and this test must be the one
 * that makes it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { countTokens as referenceCount } from "npm:gpt-tokenizer@4.0.0/encoding/o200k_base";
import { o200kFile } from "../../lib/build/tokens.ts";
import { countTokens } from "../../lib/pages/tokens.ts";
import { fileReader, openAhead } from "../../lib/server/token_ranks.ts";

/** Text none of whose words the build counted: its chunks are looked up in the file. */
const TEXT = "Ünïcode strasse-42 hilfe+agents quixotic zephyrs 法律 judgments";

Deno.test("a ranks file cut under an open reader: the count falls back to the package's ranks, never a wrong number", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/o200k_ranks.bin`;
  const form = o200kFile();
  await Deno.writeFile(path, form);
  try {
    let reads = 0;
    let readAfterCut = false;
    const count = await countTokens(TEXT, {
      builtRanks: async () => {
        const reader = (await openAhead(new URL(`file://${path}`)))!;
        return {
          read(at, length) {
            const bytes = reader.read(at, length);
            // Once the counter has read its header, pattern, counts and the packed ranks' size
            // (four reads), the file is cut, as a build writing in place would.
            if (++reads === 4) Deno.truncateSync(path, 4096);
            if (reads > 4) readAfterCut = true;
            return bytes;
          },
          close: () => reader.close(),
        };
      },
    });
    assert.ok(readAfterCut, "the file was read after it was cut");
    assert.equal(count, referenceCount(TEXT, { disallowedSpecial: new Set() }));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a reader of a missing file is none", () => {
  assert.equal(fileReader(new URL("file:///nonexistent/o200k_ranks.bin")), undefined);
});
