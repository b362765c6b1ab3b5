/**
 * Per-key usage by minute and by hour in PostgreSQL, shared by every instance: each adds its batch to
 * the same rows (`+=`, in one transaction), so the rows hold the fleet's counts. Rows are written in
 * one order (inWriteOrder), so two instances adding at once never wait on each other in a ring.
 */
import type { UsageRepository } from '../../domain/repositories'
import { type KeyTotals, NO_KEY, type Resolution, summed, type UsageRow } from '../../domain/usage'
import { addRowsSql, countsOf, ROWS_PER_INSERT, rowValues, seriesSql, totalsSql, USAGE_TABLES } from '../usage-columns'
import { guarded } from './failures'
import { exactInteger } from './numbers'
import type { Database } from './pool'

type SumsRow = Record<string, string | null>
const dollar = (n: number) => `$${n}`

export class PostgresUsage implements UsageRepository {
  constructor(private readonly sql: Database) {}

  add(minutes: UsageRow[]): Promise<void> {
    if (minutes.length === 0) return Promise.resolve()
    const batches: [Resolution, UsageRow[]][] = [
      ['minute', summed(minutes, 'minute')],
      ['hour', summed(minutes, 'hour')],
    ]
    return guarded(() =>
      this.sql.begin(async (tx) => {
        for (const [resolution, rows] of batches)
          for (let i = 0; i < rows.length; i += ROWS_PER_INSERT) {
            const chunk = rows.slice(i, i + ROWS_PER_INSERT)
            await tx.unsafe(addRowsSql(USAGE_TABLES[resolution], chunk.length, dollar), rowValues(chunk))
          }
      }),
    )
  }

  totals(resolution: Resolution, from: number): Promise<KeyTotals[]> {
    return guarded(async () => {
      const rows = (await this.sql.unsafe(totalsSql(USAGE_TABLES[resolution], '$1'), [from])) as SumsRow[]
      return rows.map((row) => ({
        keyId: row.key_id!,
        counts: countsOf(row, exactInteger),
        lastAt: exactInteger(row.last_at!),
        lastDeprecatedAt: row.last_deprecated_at === null ? null : exactInteger(row.last_deprecated_at!),
      }))
    })
  }

  series(resolution: Resolution, from: number, keyId?: string): Promise<UsageRow[]> {
    return guarded(async () => {
      const table = USAGE_TABLES[resolution]
      const rows = (
        keyId === undefined
          ? await this.sql.unsafe(seriesSql(table, '$1', null), [from])
          : await this.sql.unsafe(seriesSql(table, '$1', '$2'), [from, keyId])
      ) as SumsRow[]
      return rows.map((row) => ({ at: exactInteger(row.at!), keyId: keyId ?? NO_KEY, counts: countsOf(row, exactInteger) }))
    })
  }

  prune(resolution: Resolution, before: number): Promise<number> {
    return guarded(async () => {
      const result = await this.sql.unsafe(`DELETE FROM ${USAGE_TABLES[resolution]} WHERE at < $1`, [before])
      return (result as unknown as { count: number }).count
    })
  }
}
