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

/** Rows per INSERT: well under both engines' limits on parameters (SQLite 32766, PostgreSQL 65535). */
export const ROWS_PER_INSERT = 500
