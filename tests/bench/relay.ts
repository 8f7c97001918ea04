/**
 * Could the service enforce header-read and idle timeouts itself? `Deno.serve` offers no timeout
 * option and no access to its connections, so the only way inside the process is to own the socket:
 * accept with `Deno.listen`, time each connection out when the client sends nothing for a while, and
 * relay the bytes to `Deno.serve` on a loopback port. This measures what that relay costs, with wrk,
 * against the same `Deno.serve` reached directly, in alternating rounds in one run.
 *
 * Usage: deno task bench:relay [seconds per round, default 5]. Needs wrk. Loopback only.
 *
 * @module
 */
// deno-lint-ignore-file no-console

const IDLE_TIMEOUT_MS = 10_000;
const ROUNDS = 2;
const CONNECTIONS = 32;
const BODY = "x".repeat(1024);

const seconds = Number(Deno.args[0] ?? 5);

const direct = Deno.serve(
  { hostname: "127.0.0.1", port: 0, onListen() {} },
  () => new Response(BODY, { headers: { "content-type": "text/plain" } }),
);
const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });

/** Copies `from` to `to` until either ends; `onData` is told of every chunk. */
async function pump(from: Deno.Conn, to: Deno.Conn, onData: () => void): Promise<void> {
  const buffer = new Uint8Array(16_384);
  try {
    while (true) {
      const read = await from.read(buffer);
      if (read === null) return;
      onData();
      let written = 0;
      while (written < read) written += await to.write(buffer.subarray(written, read));
    }
  } catch {
    // Either side closed.
  }
}

async function relay(client: Deno.Conn): Promise<void> {
  const upstream = await Deno.connect({ hostname: "127.0.0.1", port: direct.addr.port });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const close = () => {
    clearTimeout(timer);
    for (const conn of [client, upstream]) {
      try {
        conn.close();
      } catch { /* closed */ }
    }
  };
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(close, IDLE_TIMEOUT_MS);
  };
  arm();
  await Promise.race([pump(client, upstream, arm), pump(upstream, client, () => {})]);
  close();
}

(async () => {
  for await (const conn of listener) void relay(conn);
})();

async function wrk(port: number): Promise<number> {
  const output = await new Deno.Command("wrk", {
    args: ["-t1", `-c${CONNECTIONS}`, `-d${seconds}s`, `http://127.0.0.1:${port}/`],
    stdout: "piped",
  }).output();
  const text = new TextDecoder().decode(output.stdout);
  return Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]);
}

const relayed = (listener.addr as Deno.NetAddr).port;
const ratios: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  // Alternate which side goes first, so drift in the machine's load falls on both.
  const first = round % 2 === 0 ? direct.addr.port : relayed;
  const a = await wrk(first);
  const b = await wrk(first === relayed ? direct.addr.port : relayed);
  const [directRps, relayRps] = first === relayed ? [b, a] : [a, b];
  ratios.push(relayRps / directRps);
}
console.log(JSON.stringify({
  relayedToDirect: ratios.map((ratio) => Number(ratio.toFixed(3))),
  connections: CONNECTIONS,
  secondsPerRun: seconds,
}));
listener.close();
await direct.shutdown();
Deno.exit(0);
