/** Day buckets of API keys, saved so that a restart does not hand out a fresh daily quota. For both engines. */
import type { LimiterStateRepository, SavedBucket } from '../../domain/repositories'
import { exactInteger } from './numbers'
import { type Answer, changes, type Integer, type Mode, rows, type Runner, sql, type Written } from './sql'

export class SqlLimiterState<M extends Mode> implements LimiterStateRepository {
  constructor(private readonly db: Runner<M>) {}

  load(): Answer<M, Map<string, SavedBucket>> {
    return this.db.read(function* () {
      const found = yield* rows<{ subject: string; tokens: number; updated_at: Integer; rpm: Integer | null; rpd: Integer | null }>(
        sql`SELECT subject, tokens, updated_at, rpm, rpd FROM limiter_state`,
      )
      return new Map(
        found.map((row) => {
          const bucket: SavedBucket = { tokens: Number(row.tokens), updatedAt: exactInteger(row.updated_at) }
          // Rows saved before the limits were kept have none.
          if (row.rpm !== null && row.rpd !== null) bucket.limits = { rpm: exactInteger(row.rpm), rpd: exactInteger(row.rpd) }
          return [row.subject, bucket]
        }),
      )
    })
  }

  save(buckets: Map<string, SavedBucket>): Written<M, void> {
    return this.db.write(function* () {
      for (const [subject, { tokens, updatedAt, limits }] of buckets) {
        const [rpm, rpd] = limits ? [limits.rpm, limits.rpd] : [null, null]
        yield* changes(sql`INSERT INTO limiter_state (subject, tokens, updated_at, rpm, rpd) VALUES (${subject}, ${tokens}, ${updatedAt}, ${rpm}, ${rpd})
                           ON CONFLICT (subject) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at, rpm = excluded.rpm, rpd = excluded.rpd`)
      }
    })
  }
}
