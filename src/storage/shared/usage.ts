/**
 * Per-key usage by minute and by hour, for both engines. Writers add: each batch is added to its rows
 * (`+=`, in one transaction), so on PostgreSQL the rows hold the fleet's counts.
 */
import type { UsageRepository } from '../../domain/repositories'
import { type KeyTotals, NO_KEY, type Resolution, summed, type UsageRow } from '../../domain/usage'
import { exactInteger } from './numbers'
import { type Answer, built, changes, type Mode, rows, type Runner } from './sql'
import { addRowsSql, countsOf, ROWS_PER_INSERT, rowValues, seriesSql, totalsSql, USAGE_TABLES } from './usage-columns'

type SumsRow = Record<string, number | string | null>

export class SqlUsage<M extends Mode> implements UsageRepository {
  constructor(private readonly db: Runner<M>) {}

  add(minutes: UsageRow[]): Answer<M, void> {
    return this.db.write(function* () {
      if (minutes.length === 0) return
      for (const resolution of ['minute', 'hour'] as const) {
        const all = summed(minutes, resolution)
        for (let i = 0; i < all.length; i += ROWS_PER_INSERT) {
          const chunk = all.slice(i, i + ROWS_PER_INSERT)
          yield* changes(built((param) => addRowsSql(USAGE_TABLES[resolution], chunk.length, param), rowValues(chunk)))
        }
      }
    })
  }

  totals(resolution: Resolution, from: number, keyId?: string): Answer<M, KeyTotals[]> {
    return this.db.read(function* () {
      const found = yield* rows<SumsRow>(ofKey(USAGE_TABLES[resolution], totalsSql, from, keyId))
      return found.map((row) => ({
        keyId: row.key_id as string,
        counts: countsOf(row, exactInteger),
        lastAt: exactInteger(row.last_at!),
        lastDeprecatedAt: row.last_deprecated_at === null ? null : exactInteger(row.last_deprecated_at!),
      }))
    })
  }

  series(resolution: Resolution, from: number, keyId?: string): Answer<M, UsageRow[]> {
    return this.db.read(function* () {
      const found = yield* rows<SumsRow>(ofKey(USAGE_TABLES[resolution], seriesSql, from, keyId))
      return found.map((row) => ({ at: exactInteger(row.at!), keyId: keyId ?? NO_KEY, counts: countsOf(row, exactInteger) }))
    })
  }

  prune(resolution: Resolution, before: number): Answer<M, number> {
    return this.db.write(function* () {
      return yield* changes(built((param) => `DELETE FROM ${USAGE_TABLES[resolution]} WHERE at < ${param(1)}`, [before]))
    })
  }
}

/** A usage statement from `from` on, of every key or of one. */
function ofKey(table: string, sql: (table: string, from: string, key: string | null) => string, from: number, keyId?: string) {
  return keyId === undefined
    ? built((param) => sql(table, param(1), null), [from])
    : built((param) => sql(table, param(1), param(2)), [from, keyId])
}
