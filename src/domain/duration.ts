/**
 * Durations and times as an operator types them: `90s`, `30m`, `24h`, `7d`; ISO 8601 times with their
 * zone. Parsed strictly, so a typo is refused rather than read as something else.
 */
import { DAY_MS, HOUR_MS, MINUTE_MS } from './time'

const UNITS: Record<string, number> = { s: 1000, m: MINUTE_MS, h: HOUR_MS, d: DAY_MS }

/** The milliseconds of a duration such as 90s, 30m, 24h or 7d (0s included); null when it is none. */
export function durationMs(text: string): number | null {
  const match = /^(\d{1,6})([smhd])$/.exec(text)
  return match ? Number(match[1]) * UNITS[match[2]!]! : null
}

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,3})?)?(?:Z|[+-](\d{2}):(\d{2}))$/

/**
 * The time (ms) of an ISO 8601 date and time with its zone (`Z` or `+02:00`), such as
 * 2027-01-31T18:00:00Z; null for anything else, a time without a zone included (whose zone would be a
 * guess) and a date that does not exist (2027-02-30).
 */
export function isoTimeMs(text: string): number | null {
  const match = ISO_TIME.exec(text)
  if (!match) return null
  const [year, month, day, hour, minute, second, zoneHours, zoneMinutes] = match.slice(1).map((part) => Number(part ?? 0))
  const daysInMonth = new Date(Date.UTC(year!, month!, 0)).getUTCDate()
  if (month! < 1 || month! > 12 || day! < 1 || day! > daysInMonth || hour! > 23 || minute! > 59 || second! > 59) return null
  if (zoneHours! > 23 || zoneMinutes! > 59) return null
  const ms = Date.parse(text)
  return Number.isFinite(ms) ? ms : null
}
