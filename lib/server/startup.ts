/**
 * Deno's own start-up failures as one sentence each (the others, every entry's:
 * `lib/lifecycle/startup_errors.ts`): a Deno KV database that cannot be opened, with the variable
 * or permission involved and the fix. `main.ts` says the sentence and exits 1, so an operator
 * never reads a stack trace for a problem of configuration or deployment.
 *
 * @module
 */

import { messageOf } from "../text/error_message.ts";

/** Whether `path` names a local SQLite file (not `:memory:` or a remote database URL). */
function isFile(path: string): boolean {
  return path !== ":memory:" && !/^[a-z][a-z0-9+.-]*:\/\//i.test(path);
}

/**
 * The one folder the compiled binary may read and write (deno.json's `compile` task, the state folder
 * of deploy/discovery@.service): its KV file must be there.
 */
const COMPILED_STATE_DIR = "/var/lib/discovery";

/**
 * Explains why the Deno KV database at `KV_PATH` could not be opened.
 *
 * @param path `KV_PATH`, or undefined for `Deno.openKv()`'s default location
 * @param options `onDenoDeploy`: the default location is the database attached to the app there;
 * `kvEnabled`: whether the runtime has `Deno.openKv` (by default, asked of the runtime)
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const sentence = explainKvError(new Error("no database"), undefined, { onDenoDeploy: true });
 * assert.match(sentence, /attach a Deno KV database to the app/);
 * ```
 */
export function explainKvError(
  error: unknown,
  path: string | undefined,
  options: { onDenoDeploy?: boolean; kvEnabled?: boolean } = {},
): string {
  const named = path === undefined ? "the default Deno KV database" : `KV_PATH ${path}`;
  const start = `Cannot open ${named}`;
  const dir = path !== undefined && isFile(path) ? folderOf(path) : undefined;
  let reason: string;
  if (!(options.kvEnabled ?? typeof Deno.openKv === "function")) {
    reason =
      'Deno KV is not enabled in this runtime, so run with --unstable-kv (deno.json\'s "unstable": ["kv"] enables it for deno run, deno serve and Deno Deploy; deno task compile passes the flag)';
  } else if (error instanceof Deno.errors.NotCapable) {
    reason = dir === undefined
      ? `this process may not open it, so grant the access it asks for (${messageOf(error)})`
      : `this process may not read and write ${dir}, so grant --allow-read and --allow-write for that folder (deno task start:kv and start:parallel grant them for that folder only) or, for the compiled binary, whose permissions are fixed, set KV_PATH to a file in ${COMPILED_STATE_DIR}`;
  } else if (dir !== undefined && !isDirectory(dir)) {
    reason =
      `its folder ${dir} does not exist or is not a folder, so create it or set KV_PATH to a file in an existing folder`;
  } else if (
    error instanceof Deno.errors.PermissionDenied ||
    /unable to open database file|readonly|read-only/i.test(messageOf(error))
  ) {
    // SQLite says only that it could not open or create the file; the folder exists, so it is the
    // folder's or the file's permissions (or a read-only file system).
    reason =
      `the database cannot be created or written there, so give the service's user read and write access to ${
        dir ?? "it"
      } (on a writable file system)`;
  } else if (path === undefined && options.onDenoDeploy) {
    reason = `${
      messageOf(error)
    }, so attach a Deno KV database to the app (Databases, Assign) or set RATE_LIMIT_STORE=memory`;
  } else {
    reason = `${messageOf(error)}, so check KV_PATH`;
  }
  return `${start}: ${reason}; nothing is served.`;
}

/**
 * The absolute folder of the file `path`, by plain string handling: `node:path` would load Node
 * compatibility before the first response (lib/README.md, "Cold start").
 */
function folderOf(path: string): string {
  const absolute = /^([\\/]|[A-Za-z]:)/.test(path) ? path : `${Deno.cwd()}/${path}`;
  const segments: string[] = [];
  for (const segment of absolute.split(/[\\/]/)) {
    if (segment === "..") {
      if (segments.length > 1) segments.pop();
    } else if (segment !== "." && (segment !== "" || segments.length === 0)) segments.push(segment);
  }
  segments.pop();
  return segments.length === 1 && segments[0] === "" ? "/" : segments.join("/");
}

function isDirectory(path: string): boolean {
  try {
    return Deno.statSync(path).isDirectory;
  } catch {
    return false;
  }
}
