/**
 * A `deno serve --parallel` module whose second worker is slow to start (1.5 s, as main.ts's
 * configuration, store and telemetry can be on a busy machine), with the stop relay main.ts uses:
 * a SIGTERM sent as soon as the first worker serves comes while the second one is starting.
 * `STARTED` names a file the first worker creates.
 *
 * @module
 */

import { relayServeStop } from "../../lib/server/serve_stop.ts";

const relay = relayServeStop();
let first = true;
try {
  Deno.openSync(Deno.env.get("STARTED")!, { createNew: true, write: true }).close();
} catch {
  first = false;
}
if (!first) await new Promise((resolve) => setTimeout(resolve, 1500));

export default {
  fetch: () => new Response(first ? "first" : "second"),
  get onListen() {
    if (Deno.env.get("RELAY") !== "off") setTimeout(() => relay.ready(), 0);
    return () => {};
  },
} satisfies Deno.ServeDefaultExport;
