/**
 * The most requests per window the Deno KV store can keep for one caller, in a module of its own so
 * that the configuration can check `RATE_LIMIT` against it without loading the KV store, which is
 * imported only when `RATE_LIMIT_STORE=kv` names it.
 *
 * @module
 */

/** The most timestamps one KV value can hold: values are limited to 64 KiB, 8 bytes per timestamp. */
export const KV_MAX_LIMIT = 8000;
