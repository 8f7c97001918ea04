/**
 * A listener's events, whatever the runtime: where it listens, and its accept incidents. When
 * accepting fails (EMFILE, "too many open files"), Deno's listener is gone and the entry listens
 * again (`lib/server/listener.ts`), while Node's keeps listening and reports each failure as an
 * `error` event (`lib/node/serve.ts`); either way an incident is reported once, however many
 * failures or attempts it takes, and its end once connections have been accepted again for
 * {@linkcode RECOVERED_AFTER_MS}. The events are written the same by every entry.
 *
 * @module
 */

import { messageOf } from "../text/error_message.ts";
import { event } from "./events.ts";

/** How long accepting must work again before an incident is reported over, in ms. */
export const RECOVERED_AFTER_MS = 1000;

/** An event of a listener, for the operational log. */
export type ListenerEvent =
  | { kind: "listening"; address: string }
  | { kind: "accept_failed"; error: string }
  | { kind: "recovered"; downMs: number; attempts: number };

/** The incidents of one listener ({@linkcode createAcceptIncidents}). */
export interface AcceptIncidents {
  /** Accepting failed: the first failure of an incident is reported, and any recovery cancelled. */
  failed(error: unknown): void;
  /** An attempt to listen again (Deno). */
  attempt(): void;
  /** Accepting works again (a new listener, or a connection accepted): the recovery is timed. */
  accepting(): void;
  /** Stops timing a recovery (the listener stops). */
  cancel(): void;
}

/**
 * The incidents of one listener, reported to `emit`.
 *
 * @param options `recoveredAfterMs`: {@linkcode RECOVERED_AFTER_MS} by default
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const events: string[] = [];
 * const incidents = createAcceptIncidents((e) => events.push(e.kind), { recoveredAfterMs: 1 });
 * incidents.failed(new Error("Too many open files"));
 * incidents.failed(new Error("Too many open files"));
 * incidents.accepting();
 * await new Promise((resolve) => setTimeout(resolve, 20));
 * assert.deepEqual(events, ["accept_failed", "recovered"]);
 * ```
 */
export function createAcceptIncidents(
  emit: (event: ListenerEvent) => void,
  options: { recoveredAfterMs?: number } = {},
): AcceptIncidents {
  let incident: { since: number; attempts: number } | undefined;
  let recovery: ReturnType<typeof setTimeout> | undefined;
  const cancel = () => {
    clearTimeout(recovery);
    recovery = undefined;
  };
  return {
    failed(error) {
      cancel();
      if (incident !== undefined) return;
      incident = { since: Date.now(), attempts: 0 };
      emit({ kind: "accept_failed", error: messageOf(error) });
    },
    attempt() {
      if (incident) incident.attempts++;
    },
    accepting() {
      if (incident === undefined || recovery !== undefined) return;
      recovery = setTimeout(() => {
        recovery = undefined;
        if (incident === undefined) return;
        emit({
          kind: "recovered",
          downMs: Date.now() - incident.since,
          attempts: incident.attempts,
        });
        incident = undefined;
      }, options.recoveredAfterMs ?? RECOVERED_AFTER_MS);
    },
    cancel,
  };
}

/**
 * Writes a listener's events: where it listens (with `baseUrl` and `fields`), and each incident
 * once.
 */
export function logListenerEvent(
  listenerEvent: ListenerEvent,
  baseUrl: string,
  fields: Record<string, unknown> = {},
): void {
  if (listenerEvent.kind === "listening") {
    event("info", "listening", { address: listenerEvent.address, baseUrl, ...fields });
  } else if (listenerEvent.kind === "accept_failed") {
    event(
      "warn",
      "accepting connections failed: serving the open ones and listening again when possible",
      { error: listenerEvent.error },
    );
  } else {
    event("info", "accepting connections again", {
      downMs: listenerEvent.downMs,
      attempts: listenerEvent.attempts,
    });
  }
}
