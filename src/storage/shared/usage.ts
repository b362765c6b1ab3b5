/**
 * Per-key usage by minute and by hour, for both engines. Writers add: each batch is added to its rows
 * (`+=`, in one transaction), so on PostgreSQL the rows hold the fleet's counts.
 */
import type { UsageRepository } from '../../domain/repositories'
import { type KeyTotals, NO_KEY, type Resolution, summed, type UsageRow } from '../../domain/usage'
import { exactInteger } from './numbers'
import { type Answer, changes, insertRows, type Mode, type Runner, rows, type Statement, sql, Words, type Written } from './sql'
import { COUNTER_COLUMNS, ROWS_PER_INSERT, USAGE_TABLES } from './usage-columns'

type SumsRow = Record<string, number | string | null>

/** The sums of every counter, as c0, c1, … */
const SUMS = new Words(COUNTER_COLUMNS.map((column, i) => `sum(${column}) AS c${i}`).join(', '))

export class SqlUsage<M extends Mode> implements UsageRepository {
  constructor(private readonly db: Runner<M>) {}

  add(minutes: UsageRow[]): Written<M, void> {
    return this.db.write(function* () {
      if (minutes.length === 0) return
      for (const resolution of ['minute', 'hour'] as const) {
        const table = USAGE_TABLES[resolution]
        const all = summed(minutes, resolution)
        for (let i = 0; i < all.length; i += ROWS_PER_INSERT)
          yield* changes(
            insertRows(
              `INSERT INTO ${table} (at, key_id, ${COUNTER_COLUMNS.join(', ')})`,
              all.slice(i, i + ROWS_PER_INSERT).map((row) => [row.at, row.keyId, ...row.counts]),
              `ON CONFLICT (at, key_id) DO UPDATE SET ${COUNTER_COLUMNS.map((c) => `${c} = ${table}.${c} + excluded.${c}`).join(', ')}`,
            ),
          )
      }
    })
  }

  totals(resolution: Resolution, from: number, keyId?: string): Answer<M, KeyTotals[]> {
    return this.db.read(function* () {
      const found = yield* rows<SumsRow>(
        sql`SELECT key_id, max(at) AS last_at, max(CASE WHEN deprecated > 0 THEN at END) AS last_deprecated_at, ${SUMS}
            FROM ${tableOf(resolution)} WHERE at >= ${from} ${ofKey(keyId)} GROUP BY key_id ORDER BY key_id`,
      )
      return found.map((row) => ({
        keyId: row.key_id as string,
        counts: countsOf(row),
        lastAt: exactInteger(row.last_at!),
        lastDeprecatedAt: row.last_deprecated_at === null ? null : exactInteger(row.last_deprecated_at!),
      }))
    })
  }

  series(resolution: Resolution, from: number, keyId?: string): Answer<M, UsageRow[]> {
    return this.db.read(function* () {
      const found = yield* rows<SumsRow>(
        sql`SELECT at, ${SUMS} FROM ${tableOf(resolution)} WHERE at >= ${from} ${ofKey(keyId)} GROUP BY at ORDER BY at`,
      )
      return found.map((row) => ({ at: exactInteger(row.at!), keyId: keyId ?? NO_KEY, counts: countsOf(row) }))
    })
  }

  prune(resolution: Resolution, before: number): Written<M, number> {
    return this.db.write(function* () {
      return yield* changes(sql`DELETE FROM ${tableOf(resolution)} WHERE at < ${before}`)
    })
  }
}

const tableOf = (resolution: Resolution) => new Words(USAGE_TABLES[resolution])

/** Of one key, or (nothing added) of every key. */
const ofKey = (keyId: string | undefined): Statement | Words => (keyId === undefined ? new Words('') : sql`AND key_id = ${keyId}`)

/** The counters of a row that carries c0, c1, … (numbers, or the strings PostgreSQL sends for sums). */
function countsOf(row: SumsRow): number[] {
  return COUNTER_COLUMNS.map((_, i) => exactInteger(row[`c${i}`]!))
}
