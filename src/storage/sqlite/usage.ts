/**
 * Per-key usage by minute and by hour in the data file: each batch is added to its rows in one
 * transaction (storage/usage-columns.ts holds the statements both backends share).
 */
import type { Database } from 'bun:sqlite'
import type { UsageRepository } from '../../domain/repositories'
import { type KeyTotals, NO_KEY, type Resolution, summed, type UsageRow } from '../../domain/usage'
import { addRowsSql, countsOf, ROWS_PER_INSERT, rowValues, seriesSql, totalsSql, USAGE_TABLES } from '../usage-columns'
import { describeUnavailable } from './failures'

type SumsRow = Record<string, number | string | null>
const asNumber = (value: string | number) => Number(value)

export class SqliteUsage implements UsageRepository {
  constructor(private readonly db: Database) {}

  add(minutes: UsageRow[]): void {
    if (minutes.length === 0) return
    try {
      this.db.transaction(() => {
        this.addTo('minute', summed(minutes, 'minute'))
        this.addTo('hour', summed(minutes, 'hour'))
      }).immediate()
    } catch (error) {
      describeUnavailable(error)
    }
  }

  private addTo(resolution: Resolution, rows: UsageRow[]): void {
    for (let i = 0; i < rows.length; i += ROWS_PER_INSERT) {
      const chunk = rows.slice(i, i + ROWS_PER_INSERT)
      this.db.query(addRowsSql(USAGE_TABLES[resolution], chunk.length, () => '?')).run(...rowValues(chunk))
    }
  }

  totals(resolution: Resolution, from: number): KeyTotals[] {
    return this.db
      .query<SumsRow, [number]>(totalsSql(USAGE_TABLES[resolution], '?'))
      .all(from)
      .map((row) => ({
        keyId: row.key_id as string,
        counts: countsOf(row, asNumber),
        lastAt: row.last_at as number,
        lastDeprecatedAt: row.last_deprecated_at as number | null,
      }))
  }

  series(resolution: Resolution, from: number, keyId?: string): UsageRow[] {
    const table = USAGE_TABLES[resolution]
    const rows =
      keyId === undefined
        ? this.db.query<SumsRow, [number]>(seriesSql(table, '?', null)).all(from)
        : this.db.query<SumsRow, [number, string]>(seriesSql(table, '?', '?')).all(from, keyId)
    return rows.map((row) => ({ at: row.at as number, keyId: keyId ?? NO_KEY, counts: countsOf(row, asNumber) }))
  }

  prune(resolution: Resolution, before: number): number {
    try {
      return this.db.query(`DELETE FROM ${USAGE_TABLES[resolution]} WHERE at < ?`).run(before).changes
    } catch (error) {
      describeUnavailable(error)
    }
  }
}
