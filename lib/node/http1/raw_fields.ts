/**
 * A request's fields as the handler reads them (`Headers`' `get` and `has`) over Node's flat list of
 * names and values (`rawHeaders`, or a head read by `raw_head.ts`): not a `Headers` built per
 * request, which costs more on Node than the rest of a request (tests/bench/README.md, "Node").
 *
 * @module
 */

/**
 * A request's fields: a name matched whatever its case, the values of a repeated field joined with
 * ", " (Node's own `headers` object keeps only the first of some, such as a repeated `Host`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const fields = new RawFields(["Host", "a.example", "Accept", "text/html", "accept", "*\/*"]);
 * assert.equal(fields.get("accept"), "text/html, *\/*");
 * assert.equal(fields.has("origin"), false);
 * ```
 */
export class RawFields {
  readonly #raw: readonly string[];

  /** Wraps `raw`: names at even indexes, each followed by its value. */
  constructor(raw: readonly string[]) {
    this.#raw = raw;
  }

  /** The value of `name`, its repeated values joined with ", ", or null when absent. */
  get(name: string): string | null {
    const wanted = name.toLowerCase();
    const raw = this.#raw;
    let value: string | null = null;
    for (let i = 0; i < raw.length; i += 2) {
      const field = raw[i]!;
      if (field.length === wanted.length && field.toLowerCase() === wanted) {
        value = value === null ? raw[i + 1]! : `${value}, ${raw[i + 1]}`;
      }
    }
    return value;
  }

  /** Whether `name` is present. */
  has(name: string): boolean {
    return this.get(name) !== null;
  }
}
