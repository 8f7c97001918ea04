/**
 * The announced removal of v1: `DEPRECATION_DATE` and `SUNSET_DATE`, both or neither, at least the
 * spec's notice apart (section 9).
 *
 * @module
 */

import type { Reader } from "./env.ts";

/** The removal of v1, if announced. */
export interface RemovalSettings {
  /** When v1 is (or will be) deprecated, if a removal has been announced. */
  deprecation: Date | undefined;
  /** When v1 will be removed, if a removal has been announced. */
  sunset: Date | undefined;
}

/** The minimum time between the announcement of a removal and the removal itself (spec section 9). */
export const MIN_DEPRECATION_NOTICE_DAYS = 90;

/** A day, in ms. */
const DAY_MS = 86_400_000;

/** `DEPRECATION_DATE` and `SUNSET_DATE`: both or neither, at least the minimum notice apart. */
export function removalSettings({ read, errors }: Reader): RemovalSettings {
  const deprecation = date(read("DEPRECATION_DATE"), "DEPRECATION_DATE", errors);
  const sunset = date(read("SUNSET_DATE"), "SUNSET_DATE", errors);
  if ((deprecation === undefined) !== (sunset === undefined)) {
    if (!errors.some((e) => e.startsWith("DEPRECATION_DATE") || e.startsWith("SUNSET_DATE"))) {
      errors.push(
        "DEPRECATION_DATE and SUNSET_DATE announce a removal together: set both or neither",
      );
    }
  } else if (deprecation && sunset) {
    const days = (sunset.getTime() - deprecation.getTime()) / DAY_MS;
    if (days < MIN_DEPRECATION_NOTICE_DAYS) {
      errors.push(
        `SUNSET_DATE must be at least ${MIN_DEPRECATION_NOTICE_DAYS} days after DEPRECATION_DATE (spec section 9); they are ${
          Math.floor(days * 10) / 10
        } days apart`,
      );
    }
  }
  return { deprecation, sunset };
}

/** An ISO 8601 date, or date-time with a zone, that exists; undefined when unset or not one. */
function date(raw: string | undefined, name: string, errors: string[]): Date | undefined {
  if (raw === undefined) return undefined;
  // ISO 8601 only: Date.parse accepts many other forms whose meaning depends on the engine.
  const iso = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2}))?$/;
  const value = new Date(raw);
  const [year, month, day] = raw.slice(0, 10).split("-").map(Number) as [number, number, number];
  // Date rolls 2027-02-30 over to March; a calendar date that does not exist is a typo, not a date.
  const exists = new Date(Date.UTC(year, month - 1, day)).getUTCDate() === day && month >= 1 &&
    month <= 12;
  if (!iso.test(raw) || Number.isNaN(value.getTime()) || !exists) {
    errors.push(
      `${name} must be an ISO 8601 date (2027-03-01) or date-time with a zone (2027-03-01T00:00:00Z), got ${
        JSON.stringify(raw)
      }`,
    );
    return undefined;
  }
  return value;
}
