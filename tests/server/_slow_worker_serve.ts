/**
 * A `deno serve --parallel` module whose second worker is slow to start (1.5 s, as main.ts's
 * configuration, store and telemetry can be on a busy machine), with the stop relay main.ts uses:
 * a SIGTERM sent as soon as the first worker serves comes while the second one is starting.
 * `STARTED` names a file the first worker creates. With `LATE_MS`, the second worker joins the
 * relay only that long after it starts (its main.ts begun late), past the relay's channel;
 * `MARKER=off` leaves the process's environment out of the relay.
 *
 * @module
 */

import { relayServeStop, type StopRelay } from "../../lib/server/serve_stop.ts";

const options = { marker: Deno.env.get("MARKER") !== "off" };
let first = true;
try {
  Deno.openSync(Deno.env.get("STARTED")!, { createNew: true, write: true }).close();
} catch {
  first = false;
}
const lateMs = first ? 0 : Number(Deno.env.get("LATE_MS") ?? 0);
let relay: StopRelay | undefined = lateMs > 0 ? undefined : relayServeStop(options);
if (!first) await new Promise((resolve) => setTimeout(resolve, lateMs > 0 ? lateMs : 1500));
relay ??= relayServeStop(options);

export default {
  fetch: () => new Response(first ? "first" : "second"),
  get onListen() {
    if (Deno.env.get("RELAY") !== "off") setTimeout(() => relay.ready(), 0);
    return () => {};
  },
} satisfies Deno.ServeDefaultExport;
