/**
 * Where the service listens: `PORT`, `HOSTNAME`, `REUSE_PORT`, and the operator's port for probes,
 * `HEALTH_PORT` (`lib/lifecycle/health.ts`).
 *
 * @module
 */

import { parseIp } from "../http/address.ts";
import { boolean, type Reader } from "./env.ts";
import { HOST_NAME } from "./rules.ts";

/** Where to listen. */
export interface ListenSettings {
  /** TCP port to listen on. */
  port: number;
  /** Interface to listen on. */
  hostname: string;
  /** Whether another process may listen on the same port (`SO_REUSEPORT`), for a one-port handover. */
  reusePort: boolean;
  /**
   * The port of `/livez` and `/readyz` on the same interface, never the public one; undefined (no
   * such listener) unless `HEALTH_PORT` is set.
   */
  healthPort: number | undefined;
}

/** The range of a TCP port; 0 picks a free one. */
const PORT_RANGE = { min: 0, max: 65535 };

/** `PORT`, `HOSTNAME`, `REUSE_PORT` and `HEALTH_PORT`. */
export function listenSettings(
  { read, int, errors }: Reader,
): ListenSettings {
  const problems = errors.length;
  const port = int("PORT", 8000, PORT_RANGE);
  const portRead = errors.length === problems;
  const hostname = read("HOSTNAME") ?? "0.0.0.0";
  if (parseIp(hostname) === undefined && !HOST_NAME.test(hostname)) {
    errors.push(
      `HOSTNAME must be an IP address or a host name to listen on, got ${JSON.stringify(hostname)}`,
    );
  }
  // Off by default: with it, a second instance started by mistake on the same port shares it
  // silently instead of failing with "address in use".
  const reusePort = boolean(read("REUSE_PORT"), false, "REUSE_PORT", errors);
  const healthPort = read("HEALTH_PORT") === undefined
    ? undefined
    : int("HEALTH_PORT", 0, PORT_RANGE);
  // Probes on the public port would be counted against a caller; 0 and 0 are two free ports.
  if (portRead && healthPort !== undefined && healthPort !== 0 && healthPort === port) {
    errors.push(
      `HEALTH_PORT must differ from PORT (both ${port}): probes have a port of their own, never the public one, so set HEALTH_PORT to another port (e.g. 8081)`,
    );
  }
  return { port, hostname, reusePort, healthPort };
}
