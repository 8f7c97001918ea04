/**
 * The portal's pages, written once: each page's file in `static/`, its path, its Markdown twin, its
 * label in the navigation, the field of `Content` (content.ts) that holds it, and the aliases it is also
 * served under. The navigation, the twins, the sitemap, the files read and rendered, and the paths
 * served are read from this table.
 *
 * @module
 */

/**
 * The pages, in the navigation's order. A Markdown twin is the page's URL with `.md` appended
 * (`index.html.md` for a folder's URL, llmstxt.org); `/api`, the alias of `/developers`, has
 * `/api.md` as the alias of its twin.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(PAGES.map(({ path }) => path), [
 *   "/",
 *   "/developers",
 *   "/developers/deprecation-policy",
 * ]);
 * ```
 */
export const PAGES = [
  {
    file: "index.md",
    content: "home",
    path: "/",
    twin: "/index.html.md",
    label: "Home",
    aliases: [],
  },
  {
    file: "developers.md",
    content: "developers",
    path: "/developers",
    twin: "/developers.md",
    label: "Developers",
    aliases: [{ path: "/api", twin: "/api.md" }],
  },
  {
    file: "deprecation-policy.md",
    content: "deprecationPolicy",
    path: "/developers/deprecation-policy",
    twin: "/developers/deprecation-policy.md",
    label: "Deprecation policy",
    aliases: [],
  },
] as const satisfies ReadonlyArray<{
  file: string;
  content: string;
  path: string;
  twin: string;
  label: string;
  aliases: ReadonlyArray<{ path: string; twin: string }>;
}>;

/** One page of {@linkcode PAGES}. */
export type SitePage = typeof PAGES[number];

/** The path of the deprecation policy, which the `Deprecation` field links to. */
export const DEPRECATION_POLICY_PATH: string =
  PAGES.find(({ file }) => file === "deprecation-policy.md")!.path;
