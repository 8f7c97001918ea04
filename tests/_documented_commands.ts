/**
 * The shell commands the guides give a reader, extracted from their Markdown as written: every
 * line of a `sh` block (a `\` continuation and a `for`/`until`/`while` loop joined into one), and
 * every inline code span that is a whole command (`deno task <name>`, or `deno run`, `deno serve`
 * or `deno test` with a `.ts` file, after any `NAME=value` assignments). Each `sh` block is one
 * group, run in order in one place; each inline command is a group of its own. Also what the
 * runner needs to know of a command: which are services (they run until stopped) and which run in
 * the background (`&`). A command a guide adds later is found and run the same way.
 *
 * @module
 */

/** One command as a guide writes it. */
export interface DocumentedCommand {
  /** The guide it is in, relative to the repository. */
  doc: string;
  /** The command, continuations joined, its trailing comment and `&` removed. */
  text: string;
  /** Written with a trailing `&`: it runs beside the group's next commands until the group ends. */
  background: boolean;
}

/** The guides whose commands are run. */
export const GUIDES = ["README.md", "deploy/README.md", "lib/limit/README.md", "tests/README.md"];

const ASSIGNMENTS = String.raw`(?:[A-Z_][A-Z0-9_]*=\S*\s+)*`;
const DENO = String.raw`(?:npx -y deno@\S+|deno)`;

/** An inline span that is a whole command, not a mention of a subcommand. */
const INLINE_COMMAND = new RegExp(
  String
    .raw`^${ASSIGNMENTS}${DENO}\s+(?:task\s+(?:-q\s+)?\w[\w:-]*(?:\s.*)?|(?:run|serve|test)\s.*\.ts\b.*)$`,
);

/**
 * A command that serves until stopped: the start tasks, `dev`, `worker` (the Workers entry on local
 * workerd), `deno serve`, `main.ts` run.
 */
const SERVICE = new RegExp(
  String
    .raw`^${ASSIGNMENTS}${DENO}\s+(?:task\s+(?:-q\s+)?(?:start|start:kv|start:parallel|dev|worker)(?:\s|$)|serve\s|run\s.*\bmain\.ts\b)`,
);

/** Whether `command` serves until it is stopped. */
export function isService(command: string): boolean {
  return SERVICE.test(command);
}

/** `line` without a trailing comment (` # ...` outside quotes). */
function withoutComment(line: string): string {
  let quote: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote !== undefined) {
      if (c === quote) quote = undefined;
    } else if (c === "'" || c === '"') {
      quote = c;
    } else if (c === "#" && (i === 0 || /\s/.test(line[i - 1]!))) {
      return line.slice(0, i).trimEnd();
    }
  }
  return line.trimEnd();
}

/** The commands of one `sh` block's lines. */
function blockCommands(doc: string, lines: readonly string[]): DocumentedCommand[] {
  const commands: DocumentedCommand[] = [];
  let pending = "";
  let depth = 0;
  for (const raw of lines) {
    const line = withoutComment(raw).trim();
    if (line === "") continue;
    if (/^(for|until|while)\b/.test(line)) depth++;
    if (/^done\b/.test(line)) depth--;
    if (line.endsWith("\\")) {
      pending += `${line.slice(0, -1).trimEnd()} `;
      continue;
    }
    pending += depth > 0 ? `${line}; ` : line;
    if (depth > 0) continue;
    const background = / &$/.test(pending);
    commands.push({ doc, text: pending.replace(/\s*&$/, ""), background });
    pending = "";
  }
  return commands;
}

/**
 * Every group of commands in `markdown` (the guide `doc`): each `sh` block, then each inline
 * command, in the order they appear.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const fence = "`".repeat(3);
 * const md = `Run \`deno task start\`, then:\n\n${fence}sh\ncurl -s localhost:8000/ # probe\n${fence}\n`;
 * assert.deepEqual(commandGroups("README.md", md).map((g) => g.map((c) => c.text)), [
 *   ["curl -s localhost:8000/"],
 *   ["deno task start"],
 * ]);
 * ```
 */
export function commandGroups(doc: string, markdown: string): DocumentedCommand[][] {
  const groups: DocumentedCommand[][] = [];
  const prose = markdown.replace(
    /^```(\w*)\n([\s\S]*?)^```$/gm,
    (_, lang: string, body: string) => {
      if (lang === "sh") groups.push(blockCommands(doc, body.split("\n")));
      return "";
    },
  );
  for (const match of prose.matchAll(/`([^`]+)`/g)) {
    const text = match[1]!.replace(/\s*\n\s*/g, " ").trim();
    if (INLINE_COMMAND.test(text)) groups.push([{ doc, text, background: false }]);
  }
  return groups.filter((group) => group.length > 0);
}
