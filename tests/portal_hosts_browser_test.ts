/**
 * The portal keeps its look by every name it is reached by (issue 25): headless Chromium (Debian's
 * `chromium`, driven by `npm:playwright-core`) opens the pages of a server configured with an
 * `https://` `PUBLIC_BASE_URL` it is not reached by, once as `127.0.0.1` and once as `localhost`,
 * as a newcomer does after `deno task start`, and as a `*.deno.net` or preview URL does on Deno
 * Deploy when the base URL names a custom domain.
 *
 * On each page the stylesheet must apply (a custom property and a `display` that only
 * `static/style.css` sets), the icon must load (200 from the page's own origin, and decoded), the
 * main navigation must stay on the host the page came by, the `canonical` link must still name the
 * configured base URL, and neither a `securitypolicyviolation` event nor a console error may be
 * reported. The page's strict Content-Security-Policy is the one served: no `bypassCSP`. Screenshots
 * go to `tests/screenshots/hosts-*.png` (git-ignored).
 *
 * Without the browser the test is skipped outside CI and fails in CI (`CI=true`).
 *
 * @module
 */
// deno-lint-ignore-file no-console
/// <reference lib="dom" />
/// <reference lib="deno.ns" />

import assert from "node:assert/strict";
import { join } from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { CHROMIUM, LAUNCH_ARGS, skipBrowserTests } from "./_chromium.ts";
import { startServer } from "./_server.ts";

/** A public base URL that neither name below matches: the pages are reached by other names. */
const BASE_URL = "https://discovery.example.com";

/** The names the pages are opened by; both differ from {@linkcode BASE_URL}'s. */
const HOSTS = ["127.0.0.1", "localhost"] as const;

const PAGES: ReadonlyArray<{ path: string; name: string; status: number }> = [
  { path: "/", name: "home", status: 200 },
  { path: "/developers", name: "developers", status: 200 },
  { path: "/developers/deprecation-policy", name: "deprecation-policy", status: 200 },
  { path: "/no-such-page", name: "not-found", status: 404 },
];

const SCREENSHOTS = join(import.meta.dirname ?? ".", "screenshots");

const skipped = skipBrowserTests("portal host-name browser test");

/** A context that records the page's CSP violations (an init script, which the CSP does not govern). */
async function recordingContext(browser: Browser): Promise<BrowserContext> {
  const context = await browser.newContext();
  await context.addInitScript(() => {
    const seen: string[] = [];
    (globalThis as unknown as { __csp: string[] }).__csp = seen;
    document.addEventListener(
      "securitypolicyviolation",
      (e: SecurityPolicyViolationEvent) =>
        seen.push(`${e.violatedDirective} blocked ${e.blockedURI}`),
    );
  });
  return context;
}

/** What a loaded page shows of the stylesheet, the icon, its navigation and canonical link. */
interface Looks {
  measure: string;
  bodyDisplay: string;
  iconHref: string;
  iconWidth: number;
  navHrefs: string[];
  anchorHrefs: string[];
  canonical: string | null;
}

/**
 * Reads what the page shows. The icon is decoded by an `<img>` of the page's icon URL: its load is
 * governed by the page's `img-src`, as the icon's is.
 */
function looks(page: Page): Promise<Looks> {
  return page.evaluate(async () => {
    const icon = document.querySelector<HTMLLinkElement>('link[rel="icon"]');
    const image = new Image();
    const iconWidth = icon === null ? 0 : await new Promise<number>((resolve) => {
      image.onload = () => resolve(image.naturalWidth);
      image.onerror = () => resolve(0);
      image.src = icon.href;
    });
    return {
      measure: getComputedStyle(document.documentElement).getPropertyValue("--measure").trim(),
      bodyDisplay: getComputedStyle(document.body).display,
      iconHref: icon?.href ?? "",
      iconWidth,
      navHrefs: [...document.querySelectorAll<HTMLAnchorElement>('nav[aria-label="Main"] a')]
        .map((a) => a.href),
      anchorHrefs: [...document.querySelectorAll<HTMLAnchorElement>("a[href]")].map((a) => a.href),
      canonical: document.querySelector<HTMLLinkElement>('link[rel="canonical"]')?.href ?? null,
    };
  });
}

/** Opens `url` and lists every way it falls short of the styled page; screenshots it. */
async function problemsOf(
  context: BrowserContext,
  url: string,
  expected: { status: number; path: string; screenshot: string },
): Promise<string[]> {
  const page = await context.newPage();
  const origin = new URL(url).origin;
  const problems: string[] = [];
  const console_: string[] = [];
  const responses = new Map<string, number>();
  page.on("console", (m) => m.type() === "error" && console_.push(m.text()));
  page.on("pageerror", (error) => console_.push(`page error: ${error.message}`));
  page.on("response", (r) => responses.set(r.url(), r.status()));
  page.on("requestfailed", (r) => responses.set(r.url(), 0));
  const response = await page.goto(url, { waitUntil: "load" });
  if (response?.status() !== expected.status) {
    problems.push(`status ${response?.status()}, expected ${expected.status}`);
  }
  const seen = await looks(page);
  if (seen.measure !== "46rem" || seen.bodyDisplay !== "flex") {
    problems.push(
      `the stylesheet is not applied (--measure "${seen.measure}", body ${seen.bodyDisplay})`,
    );
  }
  if (responses.get(`${origin}/style.css`) !== 200) {
    problems.push(`no 200 for ${origin}/style.css`);
  }
  if (seen.iconWidth === 0 || responses.get(seen.iconHref) !== 200) {
    problems.push(`the icon ${seen.iconHref} did not load (${responses.get(seen.iconHref)})`);
  }
  if (new URL(seen.iconHref || "about:blank").origin !== origin) {
    problems.push(`the icon is not same-origin: ${seen.iconHref}`);
  }
  const elsewhere = seen.navHrefs.filter((href) => new URL(href).origin !== origin);
  if (seen.navHrefs.length === 0 || elsewhere.length > 0) {
    problems.push(`navigation leaves the host: ${JSON.stringify(seen.navHrefs)}`);
  }
  // The brand, the body's and the 404 hint's links to a portal page keep the reader here too.
  const pagePaths = PAGES.filter((p) => p.status === 200).map((p) => p.path);
  const away = seen.anchorHrefs.map((href) => new URL(href))
    .filter((to) => to.protocol !== "mailto:" && to.origin !== origin)
    .filter((to) => pagePaths.includes(to.pathname)).map((to) => to.href);
  if (away.length > 0) problems.push(`links to portal pages leave the host: ${away.join(" ")}`);
  const canonical = expected.status === 200 ? BASE_URL + expected.path : null;
  if (seen.canonical !== canonical) problems.push(`canonical ${seen.canonical}, not ${canonical}`);
  const csp = await page.evaluate(() => (globalThis as unknown as { __csp: string[] }).__csp);
  problems.push(
    ...csp.map((v) => `CSP violation: ${v}`),
    // The not-found page is itself a 404, which Chromium reports on the console.
    ...console_.filter((t) => !(expected.status === 404 && t.includes("status of 404")))
      .map((t) => `console error: ${t}`),
  );
  await page.screenshot({ path: expected.screenshot, fullPage: true });
  await page.close();
  return problems;
}

Deno.test({
  name:
    "the portal pages keep their stylesheet, icon and navigation by 127.0.0.1 and localhost when PUBLIC_BASE_URL names another host",
  ignore: skipped,
  // Playwright keeps a child process and pipes between steps; browser.close() in `finally` ends them.
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const started = performance.now();
    await using server = await startServer({
      env: { PUBLIC_BASE_URL: BASE_URL, RATE_LIMIT: "100000" },
    });
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: [...LAUNCH_ARGS] });
    const problems: string[] = [];
    try {
      await Deno.mkdir(SCREENSHOTS, { recursive: true });
      const context = await recordingContext(browser);
      for (const host of HOSTS) {
        for (const { path, name, status } of PAGES) {
          const url = `http://${host}:${server.port}${path}`;
          const screenshot = join(SCREENSHOTS, `hosts-${host}-${name}.png`);
          const found = await problemsOf(context, url, { status, path, screenshot });
          problems.push(...found.map((problem) => `${url}: ${problem}`));
        }
      }
    } finally {
      await browser.close();
    }
    console.log(
      `portal by host name: ${PAGES.length} pages x ${HOSTS.length} names, ${
        Math.round(performance.now() - started)
      } ms; screenshots in ${SCREENSHOTS}/hosts-*.png`,
    );
    assert.deepEqual(problems, []);
  },
});
