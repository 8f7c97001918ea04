/**
 * A delaying TCP proxy on loopback, for tests: a store "far away" without the kernel's netem, and a
 * connection that dies silently.
 *
 * Every chunk read in either direction is written to the other side `delayMs` after it arrived, in
 * order, so a request-reply round trip through the proxy takes at least `2 · delayMs`. It listens on
 * 127.0.0.1 only, forwards only to 127.0.0.1, and closes every connection when closed.
 *
 * `freeze()` stands for a connection that dies with no FIN or RST (a NAT or firewall entry dropped,
 * a VM paused, a cable pulled): the connections open at that moment stay open at both ends, and
 * every byte either end sends on them from then on is dropped; new connections are forwarded as
 * usual.
 *
 * @module
 */

/** A running proxy. */
export interface LatencyProxy extends AsyncDisposable {
  /** The port it listens on (127.0.0.1). */
  port: number;
  /**
   * From now on drops every byte of the connections open now, in both directions, without closing
   * them (new connections are forwarded normally). Returns how many connections it froze.
   */
  freeze(): number;
  /** Stops listening and closes every proxied connection. */
  close(): Promise<void>;
}

/**
 * Starts a proxy to `127.0.0.1:<targetPort>` that delays each direction by `delayMs`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * // An echo server on loopback stands for the store.
 * const echo = Deno.listen({ hostname: "127.0.0.1", port: 0 });
 * const echoed = (async () => {
 *   const conn = await echo.accept();
 *   await conn.readable.pipeTo(conn.writable).catch(() => {});
 * })();
 * const proxy = startLatencyProxy(echo.addr.port, 20); // a round trip of at least 40 ms
 * const client = await Deno.connect({ hostname: "127.0.0.1", port: proxy.port });
 * const started = performance.now();
 * await client.write(new Uint8Array([1]));
 * assert.equal(await client.read(new Uint8Array(1)), 1);
 * assert.ok(performance.now() - started >= 39, "each direction waited 20 ms");
 * client.close();
 * await proxy.close();
 * await echoed;
 * echo.close();
 * ```
 */
export function startLatencyProxy(targetPort: number, delayMs: number): LatencyProxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.Conn>();
  /** The pairs forwarding now: freezing one sets its flag, which both directions read. */
  const live = new Set<{ frozen: boolean }>();
  const pipes: Promise<void>[] = [];
  const accepting = (async () => {
    for await (const client of listener) {
      conns.add(client);
      let server: Deno.Conn;
      try {
        server = await Deno.connect({ hostname: "127.0.0.1", port: targetPort });
      } catch {
        client.close();
        conns.delete(client);
        continue;
      }
      conns.add(server);
      const state = { frozen: false };
      live.add(state);
      const done = () => {
        live.delete(state);
        for (const conn of [client, server]) {
          if (conns.delete(conn)) {
            try {
              conn.close();
            } catch {
              // Already closed by the other direction.
            }
          }
        }
      };
      pipes.push(pipe(client, server, delayMs, state).finally(done));
      pipes.push(pipe(server, client, delayMs, state).finally(done));
    }
  })().catch(() => {});
  const close = async () => {
    try {
      listener.close();
    } catch {
      // Already closed.
    }
    for (const conn of conns) {
      try {
        conn.close();
      } catch {
        // Closed meanwhile.
      }
    }
    conns.clear();
    await accepting;
    await Promise.allSettled(pipes);
  };
  const freeze = () => {
    const frozen = live.size;
    for (const state of live) state.frozen = true;
    live.clear();
    return frozen;
  };
  return {
    port: (listener.addr as Deno.NetAddr).port,
    freeze,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/**
 * Copies `from` to `to`, writing each chunk `delayMs` after it was read, in order; once `state` is
 * frozen, keeps reading (both sockets stay open) and drops what it reads and what was still due.
 */
async function pipe(
  from: Deno.Conn,
  to: Deno.Conn,
  delayMs: number,
  state: { frozen: boolean },
): Promise<void> {
  let writing = Promise.resolve();
  const buffer = new Uint8Array(64 * 1024);
  try {
    while (true) {
      const n = await from.read(buffer);
      if (n === null) break;
      if (state.frozen) continue;
      const chunk = buffer.slice(0, n);
      const due = performance.now() + delayMs;
      // Chunks queue behind each other, each released at its own due time.
      writing = writing.then(async () => {
        const wait = due - performance.now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        if (state.frozen) return;
        await writeAll(to, chunk);
      });
    }
  } catch {
    // The connection was closed: stop copying.
  }
  await writing.catch(() => {});
}

async function writeAll(conn: Deno.Conn, chunk: Uint8Array): Promise<void> {
  let written = 0;
  while (written < chunk.length) written += await conn.write(chunk.subarray(written));
}
