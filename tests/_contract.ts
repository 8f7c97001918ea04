/**
 * The contract check: every response a test receives is held against the OpenAPI document the server
 * itself serves, so that the document and the service cannot drift apart unnoticed.
 *
 * For a (path, method, response) it finds the operation, the response object for the status (or
 * `default`), and the media type for the `Content-Type` (parameters stripped); it decodes the body
 * (`Content-Encoding`), validates it against the media type's schema with Ajv (JSON Schema 2020-12,
 * the dialect of OpenAPI 3.1, with formats), and checks that every header the document marks
 * `required: true` is present and that every documented header sent matches its schema. Anything the
 * document does not describe throws.
 *
 * Two rules of the document are applied explicitly, because OpenAPI cannot express them structurally:
 * a path the document does not list may only answer 404, or 429 once the caller's quota is spent
 * (described by the responses of a listed operation of the same method, or of GET), and a method a
 * path does not list may only answer 405, or 429 (described by the responses of that path's GET).
 *
 * @module
 */

import { Ajv2020, type ValidateFunction } from "npm:ajv@8.20.0/dist/2020.js";
import addFormatsModule from "npm:ajv-formats@3.0.1";
import { brotliDecompressSync, gunzipSync } from "node:zlib";

/** The parts of an OpenAPI document the check reads. */
export interface OpenApiDocument {
  /** The OpenAPI version. */
  openapi: string;
  /** Path items by path. */
  paths: Record<string, Record<string, unknown>>;
  /** Reusable objects. */
  components?: Record<string, Record<string, unknown>>;
  /** Everything else. */
  [key: string]: unknown;
}

/** A response as the check needs it. */
export interface ReceivedResponse {
  /** Status code. */
  status: number;
  /** Header fields. */
  headers: Headers;
  /** Body bytes as received (possibly encoded). */
  body: Uint8Array;
}

/** What {@linkcode Contract.check} found in a body. */
export interface CheckedBody {
  /** The decoded body as text. */
  text: string;
  /** The parsed body when the media type is JSON. */
  json?: unknown;
}

/** A contract built from one document. */
export interface Contract {
  /** The document. */
  document: OpenApiDocument;
  /**
   * Checks a response to `method path` against the document.
   *
   * @throws Error when the document does not describe the response or the response breaks it
   */
  check: (path: string, method: string, response: ReceivedResponse) => CheckedBody;
}

const BASE = "urn:contract:openapi";
const DECODER = new TextDecoder("utf-8", { fatal: true });

// ajv-formats is CommonJS: its default export arrives as the function or as a module namespace.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ??
  addFormatsModule) as (ajv: Ajv2020) => Ajv2020;

/** Whether a media type (without parameters) is JSON: `application/json` or a `+json` suffix. */
export function isJsonMediaType(type: string): boolean {
  return type === "application/json" || type.endsWith("+json");
}

/** The media type of a `Content-Type` value: lower case, parameters stripped. */
export function mediaTypeOf(contentType: string): string {
  return contentType.split(";")[0]!.trim().toLowerCase();
}

/** Decodes a body by its `Content-Encoding` (br, gzip or none). */
export function decodeBody(body: Uint8Array, contentEncoding: string | null): Uint8Array {
  switch (contentEncoding?.trim().toLowerCase()) {
    case undefined:
    case "":
    case "identity":
      return body;
    case "gzip":
      return new Uint8Array(gunzipSync(body));
    case "br":
      return new Uint8Array(brotliDecompressSync(body));
    default:
      throw new Error(`unknown Content-Encoding ${JSON.stringify(contentEncoding)}`);
  }
}

function escapePointer(part: string): string {
  return encodeURIComponent(part.replaceAll("~", "~0").replaceAll("/", "~1"));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Builds a contract from a parsed OpenAPI 3.1 document.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const contract = createContract(JSON.parse(await Deno.readTextFile("static/openapi.json")));
 * const headers = new Headers({ "content-type": "application/json" });
 * const body = new TextEncoder().encode("{}");
 * // A Platform without its fields, and without the RateLimit fields: the document says no.
 * assert.throws(() => contract.check("/api/v1/platform", "GET", { status: 200, headers, body }));
 * ```
 */
export function createContract(document: OpenApiDocument): Contract {
  if (!/^3\.1\.\d+$/.test(String(document.openapi))) {
    throw new Error(`not an OpenAPI 3.1 document: openapi is ${JSON.stringify(document.openapi)}`);
  }
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
  addFormats(ajv);
  // `required` naming a property without a `properties` entry is valid JSON Schema (OpenApiDocument).
  // OpenAPI annotation keywords that are not JSON Schema; the containers are walked for $refs only.
  for (const keyword of ["example", "xml", "externalDocs", "components", "paths"]) {
    ajv.addKeyword(keyword);
  }
  ajv.addSchema({ $id: BASE, components: document.components ?? {}, paths: document.paths });
  const compiled = new Map<string, ValidateFunction>();
  const validatorAt = (pointer: string): ValidateFunction => {
    let validate = compiled.get(pointer);
    if (!validate) {
      validate = ajv.compile({ $ref: `${BASE}#${pointer}` });
      compiled.set(pointer, validate);
    }
    return validate;
  };

  /** Follows a local `$ref` chain, returning the object and its JSON pointer. */
  const resolve = (value: unknown, pointer: string): [Record<string, unknown>, string] => {
    let current = value;
    let at = pointer;
    for (let hops = 0; isObject(current) && typeof current.$ref === "string"; hops++) {
      const ref = current.$ref;
      if (!ref.startsWith("#/") || hops > 16) throw new Error(`unsupported $ref ${ref} at ${at}`);
      at = ref.slice(1);
      current = ref.slice(2).split("/").reduce<unknown>(
        (node, part) =>
          isObject(node) ? node[part.replaceAll("~1", "/").replaceAll("~0", "~")] : undefined,
        document,
      );
      if (current === undefined) throw new Error(`$ref ${ref} points at nothing`);
    }
    if (!isObject(current)) throw new Error(`expected an object at ${at}`);
    return [current, at];
  };

  const operationFor = (
    path: string,
    method: string,
    status: number,
  ): [Record<string, unknown>, string] => {
    const lower = method.toLowerCase();
    const item = document.paths[path];
    if (item === undefined) {
      // The document says a CORS preflight is granted on every path: the 204 of a listed path's
      // `options` describes it.
      const preflight = lower === "options" && status === 204;
      if (status !== 404 && status !== 429 && !preflight) {
        throw new Error(
          `${method} ${path}: the document does not list this path, yet it answered ${status} (only 404, or 429 once the limit is spent, is documented for unlisted paths; 204 for a preflight)`,
        );
      }
      // Any listed path describes the 404 (and 429) every unlisted path gets; prefer one with this
      // method.
      for (const [listed, candidate] of Object.entries(document.paths)) {
        if (isObject(candidate[lower])) {
          return [candidate[lower], `/paths/${escapePointer(listed)}/${lower}`];
        }
      }
      for (const [listed, candidate] of Object.entries(document.paths)) {
        if (isObject(candidate.get)) return [candidate.get, `/paths/${escapePointer(listed)}/get`];
      }
      throw new Error("the document describes no GET operation to take the 404 response from");
    }
    const pathPointer = `/paths/${escapePointer(path)}`;
    if (isObject(item[lower])) return [item[lower], `${pathPointer}/${lower}`];
    // The document lists 405 (and 429) under each path's operations: "any other method".
    if ((status === 405 || status === 429) && isObject(item.get)) {
      return [item.get, `${pathPointer}/get`];
    }
    throw new Error(
      `${method} ${path}: the document describes no ${lower} operation, yet the service answered ${status}`,
    );
  };

  const check = (path: string, method: string, response: ReceivedResponse): CheckedBody => {
    const where = `${method} ${path} -> ${response.status}`;
    const [operation, operationPointer] = operationFor(path, method, response.status);
    const responses = operation.responses;
    if (!isObject(responses)) throw new Error(`${where}: the operation has no responses`);
    const statusKey = String(response.status);
    const rangeKey = `${statusKey[0]}XX`;
    const key = statusKey in responses
      ? statusKey
      : rangeKey in responses
      ? rangeKey
      : "default" in responses
      ? "default"
      : undefined;
    if (key === undefined) {
      throw new Error(`${where}: the document describes no response for status ${statusKey}`);
    }
    const [described, responsePointer] = resolve(
      responses[key],
      `${operationPointer}/responses/${escapePointer(key)}`,
    );

    // Headers: every required one present, every documented one that is sent valid.
    const headerObjects = isObject(described.headers) ? described.headers : {};
    for (const [name, raw] of Object.entries(headerObjects)) {
      if (name.toLowerCase() === "content-type") continue; // OpenAPI ignores it here
      const [header, headerPointer] = resolve(
        raw,
        `${responsePointer}/headers/${escapePointer(name)}`,
      );
      const value = response.headers.get(name);
      if (value === null) {
        if (header.required === true) {
          throw new Error(`${where}: the document requires header ${name}, which is missing`);
        }
        continue;
      }
      if (!isObject(header.schema)) continue;
      const schema = header.schema;
      const typed = (schema.type === "integer" || schema.type === "number") &&
          /^-?\d+(\.\d+)?$/.test(value)
        ? Number(value)
        : value;
      const validate = validatorAt(`${headerPointer}/schema`);
      if (!validate(typed)) {
        throw new Error(
          `${where}: header ${name}: ${JSON.stringify(value)} breaks its schema: ${
            ajv.errorsText(validate.errors)
          }`,
        );
      }
    }

    // Body.
    const bodyless = method.toUpperCase() === "HEAD" || response.status === 204 ||
      response.status === 304;
    if (bodyless) {
      if (response.body.length > 0) throw new Error(`${where}: a body was sent`);
      return { text: "" };
    }
    const content = isObject(described.content) ? described.content : undefined;
    if (response.body.length === 0) {
      if (content !== undefined && Object.keys(content).length > 0) {
        throw new Error(`${where}: the document describes a body, but none was sent`);
      }
      return { text: "" };
    }
    if (content === undefined) {
      throw new Error(`${where}: a body was sent, but the document describes none`);
    }
    const contentType = response.headers.get("content-type");
    if (contentType === null) throw new Error(`${where}: a body was sent without Content-Type`);
    const media = mediaTypeOf(contentType);
    const mediaKey = Object.keys(content).find((candidate) => mediaTypeOf(candidate) === media);
    if (mediaKey === undefined) {
      throw new Error(
        `${where}: the document describes no media type ${media} (it has ${
          Object.keys(content).join(", ")
        })`,
      );
    }
    const text = DECODER.decode(
      decodeBody(response.body, response.headers.get("content-encoding")),
    );
    const mediaObject = content[mediaKey];
    const checked: CheckedBody = { text };
    let value: unknown = text;
    if (isJsonMediaType(media)) {
      try {
        value = JSON.parse(text);
      } catch (error) {
        throw new Error(`${where}: the ${media} body is not JSON: ${String(error)}`);
      }
      checked.json = value;
    }
    if (isObject(mediaObject) && mediaObject.schema !== undefined) {
      const validate = validatorAt(
        `${responsePointer}/content/${escapePointer(mediaKey)}/schema`,
      );
      if (!validate(value)) {
        throw new Error(
          `${where}: the ${media} body breaks its schema: ${ajv.errorsText(validate.errors)}`,
        );
      }
    } else if (isJsonMediaType(media)) {
      throw new Error(`${where}: the document gives no schema for ${media}`);
    }
    return checked;
  };

  return { document, check };
}

/**
 * Loads the OpenAPI document a running server serves (`GET /openapi.json`) and builds its contract.
 * The request counts against the server's rate limit like any other.
 */
export async function loadContract(url: string): Promise<Contract> {
  const response = await fetch(`${url}/openapi.json`, {
    headers: { accept: "application/json", "accept-encoding": "identity" },
  });
  const text = await response.text();
  if (response.status !== 200) {
    throw new Error(`GET /openapi.json answered ${response.status}: ${text.slice(0, 200)}`);
  }
  const contract = createContract(JSON.parse(text) as OpenApiDocument);
  // The document describes itself: hold its own response against it.
  contract.check("/openapi.json", "GET", {
    status: response.status,
    headers: response.headers,
    body: new TextEncoder().encode(text),
  });
  return contract;
}
