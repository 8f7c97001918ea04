/**
 * The prerendered pages in the real service process: a copy of the project whose import map points
 * `marked` at a tripwire (`tests/_marked_tripwire.ts`) serves its pages from unmodified `static/`
 * without loading `marked`, the warm-up included, and renders a page edited in `static/` with it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { startService } from "../_service_process.ts";

const ROOT = new URL("../../", import.meta.url);
const TRIPWIRE = new URL("../_marked_tripwire.ts", import.meta.url).href;
/** What the copy needs to run main.ts. */
const COPIED = ["main.ts", "lib", "static"];
/** The warm-up's last event: every representation is built by then. */
const WARMED_UP = "warmed up: every representation built";
/** How long a test waits for the warm-up (0.5 s after start-up). */
const WARM_UP_WAIT_MS = 15_000;
const PAGES = ["/", "/developers", "/developers/deprecation-policy"];

/** A copy of the project in a temporary folder, `marked` mapped to the tripwire. */
async function projectCopy(): Promise<{ root: string; config: string }> {
  const root = await Deno.makeTempDir({ prefix: "discovery-prerender-" });
  const copy = new Deno.Command("cp", {
    args: ["-r", ...COPIED.map((name) => new URL(name, ROOT).pathname), root],
  });
  assert.equal((await copy.output()).code, 0, "the project could not be copied");
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
  config.imports.marked = TRIPWIRE;
  await Deno.writeTextFile(`${root}/deno.json`, JSON.stringify(config));
  return { root, config: `${root}/deno.json` };
}

/** Waits until `events` holds the warm-up's last one. */
async function warmedUp(events: Record<string, unknown>[]): Promise<void> {
  const deadline = Date.now() + WARM_UP_WAIT_MS;
  while (!events.some((event) => event.message === WARMED_UP)) {
    assert.ok(Date.now() < deadline, "the warm-up did not finish");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

Deno.test("the service serves its pages from unmodified static/ without loading marked, warm-up included", async () => {
  const copy = await projectCopy();
  const service = await startService({ PRODUCT_NAME: "Acme Legal" }, undefined, { copy });
  try {
    for (const path of PAGES) {
      const response = await fetch(`${service.url}${path}`);
      const html = await response.text();
      assert.equal(response.status, 200, path);
      assert.match(html, /<h1 id="[a-z-]+">/, path);
    }
    const home = await (await fetch(`${service.url}/`)).text();
    assert.match(home, /<h1 id="acme-legal">Acme Legal<\/h1>/);
    await warmedUp(service.events);
    assert.deepEqual(service.events.filter((event) => "tripwire" in event), []);
  } finally {
    await service.stop();
    await Deno.remove(copy.root, { recursive: true });
  }
});

Deno.test("a page edited in static/ is rendered by marked, loaded for it, and shows the edit", async () => {
  const copy = await projectCopy();
  const index = `${copy.root}/static/index.md`;
  await Deno.writeTextFile(index, `${await Deno.readTextFile(index)}\nEdited *by the operator*.\n`);
  const service = await startService({}, undefined, { copy });
  try {
    const response = await fetch(`${service.url}/`);
    assert.equal(response.status, 200);
    assert.match(await response.text(), /<p>Edited <em>by the operator<\/em>\.<\/p>/);
    assert.equal(service.events.filter((event) => "tripwire" in event).length, 1);
  } finally {
    await service.stop();
    await Deno.remove(copy.root, { recursive: true });
  }
});
