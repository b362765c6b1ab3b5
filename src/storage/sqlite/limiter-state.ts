/** Day buckets of API keys, saved so that a restart does not hand out a fresh daily quota. */
import type { Database } from 'bun:sqlite'
import type { LimiterStateRepository, SavedBucket } from '../../domain/repositories'

export class SqliteLimiterState implements LimiterStateRepository {
  constructor(private readonly db: Database) {}

  load(): Map<string, SavedBucket> {
    const rows = this.db
      .query<{ subject: string; tokens: number; updatedAt: number }, []>(
        'SELECT subject, tokens, updated_at AS updatedAt FROM limiter_state',
      )
      .all()
    return new Map(rows.map((row) => [row.subject, { tokens: row.tokens, updatedAt: row.updatedAt }]))
  }

  save(buckets: Map<string, SavedBucket>): void {
    if (buckets.size === 0) return
    const upsert = this.db.query(
      'INSERT OR REPLACE INTO limiter_state (subject, tokens, updated_at) VALUES (?, ?, ?)',
    )
    this.db.transaction(() => {
      for (const [subject, bucket] of buckets) upsert.run(subject, bucket.tokens, bucket.updatedAt)
    }).immediate()
  }
}
