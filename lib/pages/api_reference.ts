/**
 * The API reference of the developer portal, generated from the served OpenAPI document at start-up.
 *
 * The reference is Markdown, so the portal's HTML and Markdown representations both carry it and are
 * rendered from one source; OpenAPI descriptions are CommonMark already and pass through as they are.
 * For each path it lists the operations, the representations (the first media type of a success
 * response is the default), the response codes with their header fields, the request headers and a
 * copyable `curl` example per representation; then every response header field and every error code.
 * Only local `$ref`s (`#/...`) are followed: the served document is self-contained.
 *
 * @module
 */

/** An OpenAPI object, read loosely: the generator only reads fields and tolerates absent ones. */
type Node = Record<string, unknown>;

/** The HTTP methods an OpenAPI path item may hold, in the order the reference lists them. */
const METHODS = ["get", "head", "options", "post", "put", "patch", "delete", "trace"] as const;

/** One operation of a path, resolved. */
interface Operation {
  method: string;
  summary: string;
  responses: Array<{ status: string; response: Node }>;
  parameters: Node[];
}

function isNode(value: unknown): value is Node {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

/**
 * Follows a local `$ref` chain (`#/components/...`) to the object it names.
 *
 * @throws Error when a reference is not local, does not resolve, or loops
 */
export function resolveRef(document: unknown, node: unknown): Node {
  let current = node;
  const seen = new Set<string>();
  while (isNode(current) && typeof current.$ref === "string") {
    const ref = current.$ref;
    if (!ref.startsWith("#/")) throw new Error(`only local references are supported: ${ref}`);
    if (seen.has(ref)) throw new Error(`reference loop at ${ref}`);
    seen.add(ref);
    let target: unknown = document;
    for (const raw of ref.slice(2).split("/")) {
      const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
      target = isNode(target) ? target[key] : undefined;
    }
    if (target === undefined) throw new Error(`reference does not resolve: ${ref}`);
    current = target;
  }
  if (!isNode(current)) throw new Error("expected an object");
  return current;
}

/**
 * The first sentence of a description: up to the first `.`, `!` or `?` followed by a capital letter
 * or a code span, so that "e.g. for" does not end it. The whole text when no such end exists or the
 * cut would split a code span.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(firstSentence("A page. `text/html` by default."), "A page.");
 * ```
 */
export function firstSentence(description: string): string {
  const flat = description.replace(/\s+/g, " ").trim();
  const match = /^.+?[.!?](?= [A-Z`])/.exec(flat);
  const sentence = match?.[0] ?? flat;
  return (sentence.split("`").length - 1) % 2 === 0 ? sentence : flat;
}

/** Escapes text for one cell of a GFM table (pipes, line breaks). */
export function tableCell(value: string): string {
  return value.replace(/\s+/g, " ").trim().replaceAll("|", "\\|");
}

/** Wraps a value in a code span long enough not to collide with backticks inside it. */
export function codeSpan(value: string): string {
  const longest = Math.max(0, ...[...value.matchAll(/`+/g)].map((m) => m[0].length));
  const fence = "`".repeat(longest + 1);
  const pad = value.startsWith("`") || value.endsWith("`") ? " " : "";
  return `${fence}${pad}${value}${pad}${fence}`;
}

/** Quotes a word for a POSIX shell when it has anything but URL-safe characters. */
export function shellWord(value: string): string {
  return /^[A-Za-z0-9:/._~%@+=,-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}

/**
 * The `curl` command that fetches `url` as `mediaType`; no `Accept` header for the default one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   curlCommand("https://example.com/api/v1/platform", "text/markdown; charset=utf-8", false),
 *   "curl -s -H 'Accept: text/markdown' https://example.com/api/v1/platform",
 * );
 * ```
 */
export function curlCommand(url: string, mediaType: string, isDefault: boolean): string {
  const essence = mediaType.split(";")[0]!.trim();
  return isDefault
    ? `curl -s ${shellWord(url)}`
    : `curl -s -H ${shellWord(`Accept: ${essence}`)} ${shellWord(url)}`;
}

/** A friendly name for a media type in the examples' lead-in. */
function typeLabel(mediaType: string): string {
  const essence = mediaType.split(";")[0]!.trim();
  const known: Record<string, string> = {
    "application/json": "JSON",
    "text/markdown": "Markdown",
    "text/html": "HTML",
    "text/plain": "Plain text",
    "application/linkset+json": "Linkset JSON",
  };
  return known[essence] ?? essence;
}

function operationsOf(document: unknown, pathItem: Node): Operation[] {
  const operations: Operation[] = [];
  for (const method of METHODS) {
    const raw = pathItem[method];
    if (!isNode(raw)) continue;
    const responses = isNode(raw.responses) ? raw.responses : {};
    const parameters = [
      ...(Array.isArray(pathItem.parameters) ? pathItem.parameters : []),
      ...(Array.isArray(raw.parameters) ? raw.parameters : []),
    ].map((p) => resolveRef(document, p));
    operations.push({
      method: method.toUpperCase(),
      summary: text(raw.summary) || firstSentence(text(raw.description)),
      responses: Object.entries(responses).map(([status, r]) => ({
        status,
        response: resolveRef(document, r),
      })),
      parameters,
    });
  }
  return operations;
}

/** One row of a path's status table: the methods answering that status, and how. */
interface StatusRow {
  methods: string[];
  meaning: string;
  headers: string[];
}

/** The status rows of a path's operations, header fields in `everywhere` left out. */
function rowsOf(operations: Operation[], everywhere: string[]): Map<string, StatusRow> {
  const rows = new Map<string, StatusRow>();
  for (const operation of operations) {
    for (const { status, response } of operation.responses) {
      let row = rows.get(status);
      if (!row) {
        row = { methods: [], meaning: firstSentence(text(response.description)), headers: [] };
        rows.set(status, row);
      }
      row.methods.push(operation.method);
      for (const name of headerNames(response)) {
        if (!everywhere.includes(name) && !row.headers.includes(name)) row.headers.push(name);
      }
    }
  }
  return rows;
}

function rowKey(row: StatusRow): string {
  return JSON.stringify(row);
}

/** A GFM table of status rows, by status. */
function statusTable(rows: Array<[string, StatusRow]>): string[] {
  const lines = ["| Status | Methods | Meaning | Header fields |", "| --- | --- | --- | --- |"];
  for (const [status, row] of [...rows].sort(([a], [b]) => a.localeCompare(b))) {
    lines.push(
      `| ${status} | ${row.methods.join(", ")} | ${tableCell(row.meaning)} | ${
        tableCell(row.headers.map(codeSpan).join(", ")) || "-"
      } |`,
    );
  }
  return lines;
}

function headerNames(response: Node): string[] {
  return isNode(response.headers) ? Object.keys(response.headers) : [];
}

function mediaTypes(response: Node): string[] {
  return isNode(response.content) ? Object.keys(response.content) : [];
}

/** Error codes found in the JSON examples of a response. */
function errorCodesOf(response: Node): string[] {
  const codes: string[] = [];
  const json = isNode(response.content) ? response.content["application/json"] : undefined;
  if (!isNode(json)) return codes;
  const examples = [
    json.example,
    ...(isNode(json.examples) ? Object.values(json.examples).map((e) => isNode(e) && e.value) : []),
  ];
  for (const example of examples) {
    const error = isNode(example) ? example.error : undefined;
    if (isNode(error) && typeof error.code === "string") codes.push(error.code);
  }
  return codes;
}

/** The example of a header object as text. */
function exampleOf(header: Node): string {
  const named = isNode(header.examples) ? Object.values(header.examples) : [];
  const example = header.example ?? (isNode(named[0]) ? named[0].value : undefined) ??
    (isNode(header.schema) ? header.schema.const ?? header.schema.example : undefined);
  if (example === undefined) return "";
  return typeof example === "string" ? example : JSON.stringify(example);
}

/**
 * Generates the API reference, as Markdown, from an OpenAPI 3.x document.
 *
 * @param document the parsed OpenAPI document, placeholders filled
 * @param options `heading`: level of the reference's own heading (default 2, so `##`)
 * @returns Markdown starting with the reference's heading
 * @throws Error when the document has no `paths` or a `$ref` does not resolve
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const document = {
 *   openapi: "3.1.0",
 *   info: { title: "Example", version: "1.0.0" },
 *   paths: {
 *     "/things": {
 *       get: {
 *         summary: "List things",
 *         responses: { "200": { description: "The things." } },
 *       },
 *     },
 *   },
 * };
 * assert.match(apiReferenceMarkdown(document), /\/things/);
 * ```
 */
export function apiReferenceMarkdown(
  document: unknown,
  options: { heading?: number } = {},
): string {
  if (!isNode(document) || !isNode(document.paths)) {
    throw new Error("the OpenAPI document has no paths object");
  }
  const level = options.heading ?? 2;
  const servers = Array.isArray(document.servers) ? document.servers : [];
  const paths = Object.entries(document.paths).filter((entry): entry is [string, Node] =>
    isNode(entry[1])
  ).map(([path, item]) => ({ path, item, operations: operationsOf(document, item) }));
  const responses = paths.flatMap((p) =>
    p.operations.flatMap((o) => o.responses.map((r) => r.response))
  );
  const everywhere = fieldsOnEveryResponse(responses);
  const reference: Reference = {
    document,
    heading: (depth) => "#".repeat(level + depth),
    server: text(isNode(servers[0]) ? servers[0].url : "").replace(/\/+$/, ""),
    everywhere,
    common: new Map(),
  };
  const out = introSection(reference);
  out.push(...commonStatusSection(reference, paths));
  for (const path of paths) out.push(...pathSection(reference, path));
  out.push(...headerFieldsSection(reference, responses));
  out.push(...errorCodesSection(reference, paths));
  return out.join("\n");
}

/** What the sections of the reference share. */
interface Reference {
  /** The OpenAPI document. */
  document: Node;
  /** The Markdown heading marker `depth` levels below the reference's own. */
  heading: (depth: number) => string;
  /** The first server's URL without a trailing slash, or "". */
  server: string;
  /** Header fields present on every response of every operation: listed once, not per row. */
  everywhere: string[];
  /** Status rows the same on every path (status -> row key): listed once, not under each path. */
  common: Map<string, string>;
}

/** One path of the document, its item and its operations. */
interface PathEntry {
  path: string;
  item: Node;
  operations: Operation[];
}

/** The header fields that every one of `responses` declares. */
function fieldsOnEveryResponse(responses: readonly Node[]): string[] {
  if (responses.length === 0) return [];
  return headerNames(responses[0]!).filter((name) =>
    responses.every((r) => headerNames(r).includes(name))
  );
}

/** The heading, where the reference comes from, and the fields every response carries. */
function introSection({ document, heading, server, everywhere }: Reference): string[] {
  const info = isNode(document.info) ? document.info : {};
  const out = [`${heading(0)} API reference`, ""];
  out.push(
    `Generated from the OpenAPI document${server ? ` at ${server}/openapi.json` : ""} (${
      text(document.openapi) ? `OpenAPI ${text(document.openapi)}, ` : ""
    }API version ${
      text(info.version) || "unknown"
    }). The first representation listed for a path is its default.`,
    "",
  );
  if (everywhere.length > 0) {
    out.push(
      `Every response carries ${
        everywhere.map(codeSpan).join(", ")
      }; the tables below list the other header fields.`,
      "",
    );
  }
  return out;
}

/** The status rows every path answers the same way, listed once (kept in `reference.common`). */
function commonStatusSection(reference: Reference, paths: readonly PathEntry[]): string[] {
  const perPath = paths.map((p) => rowsOf(p.operations, reference.everywhere));
  const common = reference.common;
  for (const [status, row] of perPath[0] ?? []) {
    const key = rowKey(row);
    if (perPath.every((rows) => rows.has(status) && rowKey(rows.get(status)!) === key)) {
      common.set(status, key);
    }
  }
  if (common.size === 0 || paths.length <= 1) {
    common.clear();
    return [];
  }
  return [
    "Every path answers these the same way:",
    "",
    ...statusTable([...perPath[0]!].filter(([status]) => common.has(status))),
    "",
  ];
}

/** One path: its summary, operations, representations, request headers, statuses and examples. */
function pathSection(reference: Reference, { path, item, operations }: PathEntry): string[] {
  const out = [`${reference.heading(1)} ${codeSpan(path)}`, ""];
  const summary = text(item.summary);
  const description = text(item.description);
  if (summary || description) {
    out.push(
      [summary && `**${summary.replace(/\.$/, "")}.**`, description].filter(Boolean).join(" "),
      "",
    );
  }
  for (const operation of operations) {
    out.push(`- ${codeSpan(operation.method)}: ${operation.summary}`);
  }
  out.push("");
  const representations = representationsOf(operations);
  if (representations.length > 0) {
    out.push(
      `Representations: ${
        representations.map((t, i) => `${codeSpan(t)}${i === 0 ? " (default)" : ""}`).join(", ")
      }.`,
      "",
    );
  }
  const requestHeaders = requestHeadersOf(operations);
  if (requestHeaders.length > 0) {
    out.push(`Request headers: ${requestHeaders.map(codeSpan).join(", ")}.`, "");
  }
  const { common, everywhere, server } = reference;
  const rows = [...rowsOf(operations, everywhere)].filter(([status, row]) =>
    common.get(status) !== rowKey(row)
  );
  if (rows.length > 0) out.push(...statusTable(rows), "");
  if (common.size > 0) {
    out.push(`Also ${[...common.keys()].sort().join(", ")}, as on every path (above).`, "");
  }
  if (server) out.push(...curlExamples(server + path, representations));
  return out;
}

/** The media types of the 2xx responses of `operations`, in the order they first appear. */
function representationsOf(operations: readonly Operation[]): string[] {
  const representations: string[] = [];
  for (const operation of operations) {
    for (const { status, response } of operation.responses) {
      if (!/^2\d\d$/.test(status)) continue;
      for (const type of mediaTypes(response)) {
        if (!representations.includes(type)) representations.push(type);
      }
    }
  }
  return representations;
}

/** The request header fields `operations` take, each once. */
function requestHeadersOf(operations: readonly Operation[]): string[] {
  return [
    ...new Set(
      operations.flatMap((o) =>
        o.parameters.filter((p) => p.in === "header").map((p) => text(p.name))
      ),
    ),
  ].filter(Boolean);
}

/** A curl command per representation of `url`, the default first. */
function curlExamples(url: string, representations: readonly string[]): string[] {
  return representations.flatMap((type, i) => [
    `${typeLabel(type)}${i === 0 ? " (default)" : ""}:`,
    "",
    "```sh",
    curlCommand(url, type, i === 0),
    "```",
    "",
  ]);
}

/** Every header field, described once, in the order the document first uses them. */
function headerFieldsSection(reference: Reference, responses: readonly Node[]): string[] {
  const headers = new Map<string, Node>();
  for (const response of responses) {
    if (!isNode(response.headers)) continue;
    for (const [name, header] of Object.entries(response.headers)) {
      if (!headers.has(name)) headers.set(name, resolveRef(reference.document, header));
    }
  }
  if (headers.size === 0) return [];
  const out = [
    `${reference.heading(1)} Response header fields`,
    "",
    "| Field | Meaning | Example |",
    "| --- | --- | --- |",
  ];
  for (const [name, header] of headers) {
    const example = exampleOf(header);
    out.push(
      `| ${codeSpan(name)} | ${tableCell(text(header.description))} | ${
        example ? tableCell(codeSpan(example)) : "-"
      } |`,
    );
  }
  out.push("");
  return out;
}

/**
 * The error codes: from the Error schema's enum when present, with statuses from the responses that
 * show them.
 */
function errorCodesSection(reference: Reference, paths: readonly PathEntry[]): string[] {
  const byCode = errorCodesOfPaths(paths);
  if (byCode.size === 0) return [];
  const out = [
    `${reference.heading(1)} Error codes`,
    "",
    'Errors are JSON: `{"error":{"code","message","hint"}}`. Branch on `code`; `message` and `hint` are for people and may change.',
    "",
    "| Code | Status | Meaning |",
    "| --- | --- | --- |",
  ];
  for (const [code, { statuses, meaning }] of byCode) {
    const capitalised = meaning.charAt(0).toUpperCase() + meaning.slice(1);
    out.push(`| ${codeSpan(code)} | ${[...statuses].join(", ")} | ${tableCell(capitalised)} |`);
  }
  out.push("");
  return out;
}

/** Each error code the responses of `paths` show, with their statuses and the first meaning given. */
function errorCodesOfPaths(
  paths: readonly PathEntry[],
): Map<string, { statuses: Set<string>; meaning: string }> {
  const byCode = new Map<string, { statuses: Set<string>; meaning: string }>();
  for (const { operations } of paths) {
    for (const operation of operations) {
      for (const { status, response } of operation.responses) {
        for (const code of errorCodesOf(response)) {
          const entry = byCode.get(code) ??
            {
              statuses: new Set<string>(),
              meaning: firstSentence(text(response.description)).replace(
                /^Error `[^`]+`:\s*/,
                "",
              ),
            };
          entry.statuses.add(status);
          byCode.set(code, entry);
        }
      }
    }
  }
  return byCode;
}
