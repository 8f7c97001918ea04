/**
 * What the memory benchmarks (`spray.ts`, `soak.ts`) need of the processes they start: a free port
 * on 127.0.0.1, and a process's resident and peak memory as the kernel counts them.
 *
 * @module
 */

/** A port on 127.0.0.1 that was free a moment ago. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** VmRSS and VmHWM of `pid` in MiB. */
export async function status(pid: number): Promise<{ rss: number; hwm: number }> {
  // Through cat: Deno asks for --allow-all to read /proc/<pid> itself.
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/status`], stdout: "piped" })
    .output();
  const text = new TextDecoder().decode(out.stdout);
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(text)?.[1]);
  return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 };
}
