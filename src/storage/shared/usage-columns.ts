/**
 * The usage tables' columns, for both backends: one column per counter of domain/usage.ts, in its
 * order. Part of the schema: a change to the counters needs a migration (a column added at the end),
 * and the tables as first made stay as they were.
 */
import { COUNTERS, LATENCY_SLOTS, type Resolution } from '../../domain/usage'

export const USAGE_TABLES: Record<Resolution, string> = { minute: 'usage_minutes', hour: 'usage_hours' }

/** The columns the tables were first made with. */
const FIRST_COLUMNS: readonly string[] = [
  'ok',
  'client_errors',
  'limited',
  'server_errors',
  'deprecated',
  ...Array.from({ length: LATENCY_SLOTS }, (_, i) => `latency_${String(i).padStart(2, '0')}`),
]
/** Answers 501, a column added later: before it, they were counted in server_errors. */
const NOT_IMPLEMENTED_COLUMN = 'not_implemented'

export const COUNTER_COLUMNS: readonly string[] = [...FIRST_COLUMNS, NOT_IMPLEMENTED_COLUMN]
if (COUNTER_COLUMNS.length !== COUNTERS) throw new Error('the usage columns do not match the counters')

/** The CREATE TABLE statements of both tables as first made, with the column types of a backend. */
export function usageTablesSql(integer: string): string {
  return Object.values(USAGE_TABLES)
    .map(
      (table) => `CREATE TABLE ${table} (
     at ${integer} NOT NULL,
     key_id text NOT NULL,
     ${FIRST_COLUMNS.map((column) => `${column} ${integer} NOT NULL`).join(',\n     ')},
     PRIMARY KEY (at, key_id)
   );
   CREATE INDEX ${table}_by_key ON ${table} (key_id, at);`,
    )
    .join('\n   ')
}

/** The migration that adds the 501s' column, zero in the rows already there. */
export function notImplementedColumnSql(integer: string): string {
  return Object.values(USAGE_TABLES)
    .map((table) => `ALTER TABLE ${table} ADD COLUMN ${NOT_IMPLEMENTED_COLUMN} ${integer} NOT NULL DEFAULT 0;`)
    .join('\n   ')
}

/** `INSERT … ON CONFLICT DO UPDATE` adding `rows` rows to `table`, with placeholders made by `param(n)` (1-based). */
export function addRowsSql(table: string, rows: number, param: (n: number) => string): string {
  const width = 2 + COUNTER_COLUMNS.length
  const values = Array.from(
    { length: rows },
    (_, r) => `(${Array.from({ length: width }, (_, c) => param(r * width + c + 1)).join(', ')})`,
  ).join(', ')
  return `INSERT INTO ${table} (at, key_id, ${COUNTER_COLUMNS.join(', ')}) VALUES ${values}
          ON CONFLICT (at, key_id) DO UPDATE SET ${COUNTER_COLUMNS.map((c) => `${c} = ${table}.${c} + excluded.${c}`).join(', ')}`
}

/** The values of rows, flat, in addRowsSql's order. */
export function rowValues(rows: readonly { at: number; keyId: string; counts: number[] }[]): (number | string)[] {
  return rows.flatMap((row) => [row.at, row.keyId, ...row.counts])
}

/** The sums of every counter, as c0, c1, … */
export const SUMS = COUNTER_COLUMNS.map((column, i) => `sum(${column}) AS c${i}`).join(', ')

/** Per-key totals from `at` on (one parameter, the start). */
export function totalsSql(table: string, param: string, key: string | null): string {
  return `SELECT key_id, max(at) AS last_at, max(CASE WHEN deprecated > 0 THEN at END) AS last_deprecated_at, ${SUMS}
          FROM ${table} WHERE at >= ${param}${key ? ` AND key_id = ${key}` : ''} GROUP BY key_id ORDER BY key_id`
}

/** Buckets from `at` on, summed over every key (one parameter) or for one key (two: the start, the key). */
export function seriesSql(table: string, start: string, key: string | null): string {
  return `SELECT at, ${SUMS} FROM ${table} WHERE at >= ${start}${key ? ` AND key_id = ${key}` : ''} GROUP BY at ORDER BY at`
}

/** The counters of a row that carries c0, c1, … (numbers, or the strings PostgreSQL sends for sums). */
export function countsOf(row: Record<string, unknown>, toNumber: (value: string | number) => number): number[] {
  return COUNTER_COLUMNS.map((_, i) => toNumber(row[`c${i}`] as string | number))
}

/** Rows per INSERT: well under both engines' limits on parameters (SQLite 32766, PostgreSQL 65535). */
export const ROWS_PER_INSERT = 500
