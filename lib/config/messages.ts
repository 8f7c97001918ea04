/**
 * The configuration's messages to the operator: its problems as one message, and any text with the
 * credentials it may quote masked (every start-up message and event goes through it).
 *
 * @module
 */

/** Formats the problems of a failed {@linkcode loadConfig} as one message for stderr. */
export function formatConfigErrors(errors: readonly string[]): string {
  return `Configuration is invalid (${errors.length} problem${
    errors.length === 1 ? "" : "s"
  }); nothing is served:\n${errors.map((e) => `  - ${redactSecrets(e)}`).join("\n")}`;
}

/**
 * `text` with every credential it may hold masked as `***`: the password of anything shaped like
 * `scheme://user:password@host` or `user:password@host` (parsed or not: a URL that `URL.parse`
 * refuses, such as one with port 637900, is masked all the same), a userinfo holding no `:`
 * (it may be a token), and the value of `name=value` pairs whose name says it is secret
 * (`Authorization=Bearer x`, `api-key=x`, `token=x`: `OTEL_EXPORTER_OTLP_HEADERS`' shape). Every
 * start-up message goes through it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   redactSecrets("REDIS_URL got redis://default:hunter2@redis.internal:637900"),
 *   "REDIS_URL got redis://default:***@redis.internal:637900",
 * );
 * assert.equal(redactSecrets("authorization=Bearer abc,x-ok=1"), "authorization=***,x-ok=1");
 * ```
 */
export function redactSecrets(text: string): string {
  return text
    .replace(/([a-z][a-z0-9+.-]*:\/\/)([^\s"'<>]*)@/gi, (_, scheme: string, info: string) => {
      const colon = info.indexOf(":");
      // The user name is kept: it names the account to check, and is no secret.
      return `${scheme}${colon < 0 ? "" : info.slice(0, colon + 1)}***@`;
    })
    .replace(
      /(^|[\s"',;=(])([^\s:/@"',;=()]+):(?!\/\/)([^\s"'<>]*)@/g,
      (whole, before: string, user: string) =>
        user.toLowerCase() === "mailto" ? whole : `${before}${user}:***@`,
    )
    .replace(
      /((?:^|[\s,;"'{])[\w.-]*(?:auth|token|key|secret|password|passwd|credential|session|cookie)[\w.-]*\s*=\s*)("[^"]*"|[^,;\s"']+(?: [^,;\s"'=]+)?)/gi,
      "$1***",
    );
}
