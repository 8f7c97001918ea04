/**
 * Debian's Chromium for the browser tests: where it is, the flags of a headless run on a machine with
 * no network, and whether the tests run here. Outside CI a machine without it skips them (saying why
 * on its own line); in CI (`CI=true`) they run and fail without it, because `.ci/run` installs it.
 *
 * @module
 */

/** Debian's Chromium (`apt-get install chromium`). */
export const CHROMIUM = "/usr/bin/chromium";

/** Headless, and nothing fetched from elsewhere: the machine's network is closed. */
export const LAUNCH_ARGS: readonly string[] = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];

/** Whether Chromium is installed. */
export function chromiumPresent(): boolean {
  try {
    return Deno.statSync(CHROMIUM).isFile;
  } catch {
    return false;
  }
}

/**
 * Whether the browser tests named `suite` are skipped here: only outside CI and without Chromium,
 * in which case the reason is printed on its own line.
 */
export function skipBrowserTests(suite: string): boolean {
  if (chromiumPresent() || Deno.env.get("CI") === "true") return false;
  // deno-lint-ignore no-console
  console.log(`${suite} skipped: ${CHROMIUM} is absent (apt-get install -y chromium to run them)`);
  return true;
}
