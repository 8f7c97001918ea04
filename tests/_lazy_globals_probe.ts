/**
 * A `--preload` module for cold-start tests: reports on stderr, as JSON lines, each first use of a
 * global that Deno loads lazily (`_lazy_globals.ts`: Node's timers, `Buffer`, `process`, `atob`,
 * `btoa`), the first call of each `console` method, and when `Deno.serve`'s handler has produced its
 * first response. Every global keeps working: the probe
 * only reads the runtime's own lazy getter when the global is first used.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { LAZY_GLOBALS } from "./_lazy_globals.ts";

const writeError = console.error.bind(console);

function report(fields: Record<string, unknown>): void {
  writeError(JSON.stringify({ probe: true, ...fields }));
}

// The console is loaded on its first use: the service's own calls are reported too.
for (const method of ["log", "error", "warn", "info", "debug"] as const) {
  const call = console[method].bind(console);
  let reported = false;
  console[method] = (...args: unknown[]) => {
    if (!reported) {
      reported = true;
      report({ consoleCall: method, stack: new Error().stack });
    }
    call(...args);
  };
}

function watch(name: string): void {
  const descriptor = Object.getOwnPropertyDescriptor(globalThis, name);
  const load = descriptor?.get;
  if (load === undefined) return;
  let value: unknown;
  let loaded = false;
  Object.defineProperty(globalThis, name, {
    configurable: true,
    enumerable: descriptor!.enumerable ?? false,
    get() {
      if (!loaded) {
        loaded = true;
        report({ lazyGlobal: name, stack: new Error().stack });
        value = load.call(globalThis);
      }
      return value;
    },
    set(replacement) {
      loaded = true;
      value = replacement;
    },
  });
}

for (const name of LAZY_GLOBALS) watch(name);

const serve = Deno.serve;
let answered = false;
// deno-lint-ignore no-explicit-any
(Deno as any).serve = (options: Deno.ServeTcpOptions, handler: Deno.ServeHandler) =>
  serve(options, async (request, info) => {
    const response = await handler(request, info);
    if (!answered) {
      answered = true;
      report({ firstResponse: response.status });
    }
    return response;
  });
