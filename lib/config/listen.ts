/**
 * Where the service listens: `PORT`, `HOSTNAME` and `REUSE_PORT`.
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
}

/** `PORT`, `HOSTNAME` and `REUSE_PORT`. */
export function listenSettings(
  { read, int, errors }: Reader,
): ListenSettings {
  const port = int("PORT", 8000, { min: 0, max: 65535 });
  const hostname = read("HOSTNAME") ?? "0.0.0.0";
  if (parseIp(hostname) === undefined && !HOST_NAME.test(hostname)) {
    errors.push(
      `HOSTNAME must be an IP address or a host name to listen on, got ${JSON.stringify(hostname)}`,
    );
  }
  // Off by default: with it, a second instance started by mistake on the same port shares it
  // silently instead of failing with "address in use".
  const reusePort = boolean(read("REUSE_PORT"), false, "REUSE_PORT", errors);
  return { port, hostname, reusePort };
}
