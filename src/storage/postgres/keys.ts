/**
 * API keys, key-limit resets and saved day buckets in PostgreSQL. Several instances read the same
 * rows: a reset is kept (with a sequence number) rather than taken, so every instance sees it once.
 */
import type { SQL } from 'bun'
import type { ApiKeyRecord, KeyRepository, LimiterStateRepository, LimitReset, SavedBucket } from '../types'
import { guarded } from './errors'
import { LOCKS } from './migrations'
import { exactInteger } from './numbers'

interface KeyRow {
  id: string
  name: string
  plan: ApiKeyRecord['plan']
  rpm: string
  rpd: string
  secret_hash: string
  created_at: string
  last_used_at: string | null
  revoked_at: string | null
}

const optional = (value: string | null) => (value === null ? null : exactInteger(value))

export class PostgresKeys implements KeyRepository {
  /** The newest reset this handle has reported; resets older than its opening are not reported. */
  private resetsSeen: number | null = null

  constructor(private readonly sql: SQL) {}

  insert(r: ApiKeyRecord): Promise<void> {
    return guarded(async () => {
      await this.sql`INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)
                     VALUES (${r.id}, ${r.name}, ${r.plan}, ${r.rpm}, ${r.rpd}, ${r.secretHash}, ${r.createdAt})`
    })
  }

  list(): Promise<ApiKeyRecord[]> {
    return guarded(async () => {
      const rows = (await this.sql`SELECT * FROM api_keys ORDER BY created_at, id`) as KeyRow[]
      return rows.map((row) => ({
        id: row.id,
        name: row.name,
        plan: row.plan,
        rpm: exactInteger(row.rpm),
        rpd: exactInteger(row.rpd),
        secretHash: row.secret_hash,
        createdAt: exactInteger(row.created_at),
        lastUsedAt: optional(row.last_used_at),
        revokedAt: optional(row.revoked_at),
      }))
    })
  }

  revoke(id: string, now: number): Promise<boolean> {
    return guarded(async () => (await this.sql`UPDATE api_keys SET revoked_at = coalesce(revoked_at, ${now}) WHERE id = ${id}`).count > 0)
  }

  /** Keys are never deleted and a revocation is never undone, so the two counts only grow with each change. */
  changeMark(): Promise<string> {
    return guarded(async () => {
      const [row] = (await this.sql`SELECT count(*) AS keys, count(revoked_at) AS revoked FROM api_keys`) as { keys: string; revoked: string }[]
      return `${row!.keys}:${row!.revoked}`
    })
  }

  recordLastUsed(lastUsed: Map<string, number>): Promise<void> {
    if (lastUsed.size === 0) return Promise.resolve()
    return guarded(() =>
      this.sql.begin(async (tx) => {
        for (const [id, at] of lastUsed)
          await tx`UPDATE api_keys SET last_used_at = greatest(coalesce(last_used_at, 0), ${at}) WHERE id = ${id}`
      }),
    )
  }

  resetLimits(id: string, now: number): Promise<boolean> {
    return guarded(() =>
      this.sql.begin(async (tx) => {
        if ((await tx`SELECT 1 FROM api_keys WHERE id = ${id}`).length === 0) return false
        // Sequence numbers visible in order, as for pet ids: a poll that has read past one never misses it.
        await tx`SELECT pg_advisory_xact_lock(${LOCKS.limitResets})`
        await tx`DELETE FROM limiter_state WHERE subject = ${`key:${id}`}`
        await tx`INSERT INTO limit_resets (key_id, requested_at, seq) VALUES (${id}, ${now}, nextval('limit_resets_seq'))
                 ON CONFLICT (key_id) DO UPDATE SET requested_at = EXCLUDED.requested_at, seq = EXCLUDED.seq`
        return true
      }),
    )
  }

  takeLimitResets(): Promise<LimitReset[]> {
    return guarded(async () => {
      const seen = this.resetsSeen
      const rows = (await this.sql`SELECT key_id, seq FROM limit_resets WHERE seq > ${seen ?? 0} ORDER BY seq`) as { key_id: string; seq: string }[]
      if (rows.length > 0) this.resetsSeen = exactInteger(rows[rows.length - 1]!.seq)
      else this.resetsSeen ??= 0
      return seen === null ? [] : rows.map((row) => ({ keyId: row.key_id, seq: exactInteger(row.seq) }))
    })
  }

  /** Under the start-up lock, so instances that start together on an empty database make one key. */
  insertIfNone(r: ApiKeyRecord): Promise<boolean> {
    return guarded(() =>
      this.sql.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${LOCKS.schema})`
        if ((await tx`SELECT 1 FROM api_keys LIMIT 1`).length > 0) return false
        await tx`INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)
                 VALUES (${r.id}, ${r.name}, ${r.plan}, ${r.rpm}, ${r.rpd}, ${r.secretHash}, ${r.createdAt})`
        return true
      }),
    )
  }
}

export class PostgresLimiterState implements LimiterStateRepository {
  constructor(private readonly sql: SQL) {}

  load(): Promise<Map<string, SavedBucket>> {
    return guarded(async () => {
      const rows = (await this.sql`SELECT subject, tokens, updated_at FROM limiter_state`) as { subject: string; tokens: number; updated_at: string }[]
      return new Map(rows.map((row) => [row.subject, { tokens: Number(row.tokens), updatedAt: exactInteger(row.updated_at) }]))
    })
  }

  save(buckets: Map<string, SavedBucket>): Promise<void> {
    if (buckets.size === 0) return Promise.resolve()
    return guarded(() =>
      this.sql.begin(async (tx) => {
        for (const [subject, bucket] of buckets)
          await tx`INSERT INTO limiter_state (subject, tokens, updated_at) VALUES (${subject}, ${bucket.tokens}, ${bucket.updatedAt})
                   ON CONFLICT (subject) DO UPDATE SET tokens = EXCLUDED.tokens, updated_at = EXCLUDED.updated_at`
      }),
    )
  }
}
