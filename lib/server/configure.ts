/**
 * The configuration and content the process starts with: Deno Deploy's environment when there, the
 * validated configuration, the loaded content; or one sentence per problem and exit 1. (Its
 * warnings are said once it listens: `lib/lifecycle/warnings.ts`.)
 *
 * @module
 */

import { type Config, loadConfig } from "../config/config.ts";
import { type Content, loadContent } from "../pages/content.ts";
import { event, fatal } from "../lifecycle/events.ts";
import { fatalExplained } from "./events.ts";
import { DISK_STATIC_FILES } from "./static_files.ts";
import { prepareBuiltRanks } from "./token_ranks.ts";

/** What the process starts with. */
export interface Configured {
  config: Config;
  content: Content;
  /** Whether this is Deno Deploy. */
  onDeploy: boolean;
}

/**
 * Reads the configuration from `readEnv` (through Deno Deploy's defaults there) and the content;
 * exits 1 naming every problem.
 */
export async function configure(
  readEnv: (name: string) => string | undefined,
): Promise<Configured> {
  // The first Markdown response finds the token counts' file open and its counts read, off the main
  // thread meanwhile (`token_ranks.ts`).
  prepareBuiltRanks();
  // Deno Deploy sets DENO_DEPLOY=true (`onDenoDeploy` in deno_deploy.ts, tested there); that
  // module, with the platform's defaults, is imported on Deploy only (lib/README.md, "Cold start").
  const onDeploy = readEnv("DENO_DEPLOY") === "true";
  const platform =
    await (onDeploy
      ? import("./deno_deploy.ts").then(({ deployEnv }) => deployEnv(readEnv))
      : Promise.resolve({ env: readEnv, errors: [], derivedBaseUrl: undefined }))
      .catch((error) => fatalExplained((startup) => startup.explainStartupError(error)));
  const loaded = loadConfig(platform.env);
  if (!loaded.ok || platform.errors.length > 0) {
    return fatal([...platform.errors, ...(loaded.ok ? [] : loaded.errors)]);
  }
  const config = loaded.config;
  if (platform.derivedBaseUrl !== undefined) {
    event("info", "PUBLIC_BASE_URL is unset: links name the Deno Deploy timeline's URL", {
      baseUrl: platform.derivedBaseUrl,
    });
  }
  const content = loadContent(config, DISK_STATIC_FILES);
  if (!content.ok) return fatal(content.errors);
  return { config, content: content.content, onDeploy };
}
