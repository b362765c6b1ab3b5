/**
 * API keys and limit resets in PostgreSQL, read by several instances: a reset is kept with a sequence
 * number, so each instance sees it once, and each key change takes a change number, so they read only it.
 */
import type { SQL } from 'bun'
import type { Database } from './pool'
import type { ApiKeyRecord, KeyChange, SecretFormat } from '../../domain/api-key'
import type { Limits } from '../../domain/plans'
import type { KeyChanges, KeyRepository, LimitReset, Revocation } from '../../domain/repositories'
import { keySubject } from '../../domain/subject'
import { guarded, writing } from './failures'
import { LOCKS } from './migrations'
import { exactInteger } from '../shared/numbers'

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
  expires_at: string | null
  secret_format: SecretFormat
  secret_last_used_at: string | null
  rolled_at: string | null
  previous_secret_hash: string | null
  previous_ends_at: string | null
  previous_last_used_at: string | null
}

type ChangeRow = Pick<
  KeyRow,
  'id' | 'plan' | 'rpm' | 'rpd' | 'secret_hash' | 'revoked_at' | 'expires_at' | 'rolled_at' | 'previous_secret_hash' | 'previous_ends_at'
>

/** Rows per read of changed keys (see changesSince). */
const CHANGES_PAGE = 10_000

const optional = (value: string | null) => (value === null ? null : exactInteger(value))

function toRecord(row: KeyRow): ApiKeyRecord {
  return {
    ...toChange(row),
    name: row.name,
    createdAt: exactInteger(row.created_at),
    lastUsedAt: optional(row.last_used_at),
    secretLastUsedAt: optional(row.secret_last_used_at),
    secretFormat: row.secret_format,
    previousLastUsedAt: optional(row.previous_last_used_at),
  }
}

function toChange(row: ChangeRow): KeyChange {
  return {
    id: row.id,
    plan: row.plan,
    rpm: exactInteger(row.rpm),
    rpd: exactInteger(row.rpd),
    secretHash: row.secret_hash,
    revokedAt: optional(row.revoked_at),
    expiresAt: optional(row.expires_at),
    rolledAt: optional(row.rolled_at),
    previousSecretHash: row.previous_secret_hash,
    previousEndsAt: optional(row.previous_ends_at),
  }
}

/** The next key change number in `tx`, under a lock until it commits, as for pet ids: visible in order. */
async function takeChange(tx: SQL): Promise<string> {
  await tx`SELECT pg_advisory_xact_lock(${LOCKS.keyChanges})`
  const [row] = (await tx`SELECT nextval('api_keys_change_seq') AS change`) as { change: string }[]
  return row!.change
}

async function insertKey(tx: SQL, r: ApiKeyRecord): Promise<void> {
  const change = await takeChange(tx)
  await tx`INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at, expires_at, secret_format, change)
           VALUES (${r.id}, ${r.name}, ${r.plan}, ${r.rpm}, ${r.rpd}, ${r.secretHash}, ${r.createdAt}, ${r.expiresAt}, ${r.secretFormat}, ${change})`
}

export class PostgresKeys implements KeyRepository {
  /** The newest reset this handle has reported; resets older than its opening are not reported. */
  private resetsSeen: number | null = null

  constructor(private readonly sql: Database) {}

  insert(r: ApiKeyRecord): Promise<void> {
    return writing(this.sql, (tx) => insertKey(tx, r))
  }

  list(): Promise<ApiKeyRecord[]> {
    return guarded(async () => ((await this.sql`SELECT * FROM api_keys ORDER BY created_at, id`) as KeyRow[]).map(toRecord))
  }

  get(id: string): Promise<ApiKeyRecord | null> {
    return guarded(async () => {
      const [row] = (await this.sql`SELECT * FROM api_keys WHERE id = ${id}`) as KeyRow[]
      return row ? toRecord(row) : null
    })
  }

  /** A key already revoked keeps its time and takes no change number. */
  revoke(id: string, now: number): Promise<Revocation> {
    return writing(this.sql, async (tx) => {
      const [key] = (await tx`SELECT revoked_at FROM api_keys WHERE id = ${id} FOR UPDATE`) as { revoked_at: string | null }[]
      if (key === undefined) return 'no-key'
      if (key.revoked_at !== null) return 'already-revoked'
      await tx`UPDATE api_keys SET revoked_at = ${now}, change = ${await takeChange(tx)} WHERE id = ${id}`
      return 'revoked'
    })
  }

  setPlan(id: string, plan: ApiKeyRecord['plan'], limits: Limits): Promise<boolean> {
    return writing(this.sql, async (tx) => {
      const [key] = (await tx`SELECT 1 FROM api_keys WHERE id = ${id} AND revoked_at IS NULL FOR UPDATE`) as unknown[]
      if (key)
        await tx`UPDATE api_keys SET plan = ${plan}, rpm = ${limits.rpm}, rpd = ${limits.rpd}, change = ${await takeChange(tx)} WHERE id = ${id}`
      return key !== undefined
    })
  }

  setExpiry(id: string, expiresAt: number | null): Promise<boolean> {
    return writing(this.sql, async (tx) => {
      const [key] = (await tx`SELECT 1 FROM api_keys WHERE id = ${id} AND revoked_at IS NULL FOR UPDATE`) as unknown[]
      if (key) await tx`UPDATE api_keys SET expires_at = ${expiresAt}, change = ${await takeChange(tx)} WHERE id = ${id}`
      return key !== undefined
    })
  }

  roll(id: string, secretHash: string, now: number, previousEndsAt: number): Promise<boolean> {
    return writing(this.sql, async (tx) => {
      const [key] = (await tx`SELECT 1 FROM api_keys WHERE id = ${id} AND revoked_at IS NULL FOR UPDATE`) as unknown[]
      if (key)
        await tx`UPDATE api_keys SET previous_secret_hash = secret_hash, previous_last_used_at = secret_last_used_at,
                                     previous_ends_at = ${previousEndsAt}, secret_hash = ${secretHash}, secret_last_used_at = NULL,
                                     secret_format = 'checked', rolled_at = ${now}, change = ${await takeChange(tx)}
                 WHERE id = ${id}`
      return key !== undefined
    })
  }

  /**
   * Read in pages: without statistics (after a bulk import) PostgreSQL plans an unbounded `change > $1` as a
   * scan of every key, and a page keeps it on the index. Numbers are unique and visible in order.
   */
  changesSince(after: number): Promise<KeyChanges> {
    return guarded(async () => {
      const records: KeyChange[] = []
      for (let last = after; ; ) {
        const rows = (await this.sql`SELECT id, plan, rpm, rpd, secret_hash, revoked_at, expires_at, rolled_at, previous_secret_hash,
                                            previous_ends_at, change FROM api_keys
                                     WHERE change > ${last}::bigint ORDER BY change LIMIT ${CHANGES_PAGE}`) as (ChangeRow & {
          change: string
        })[]
        for (const row of rows) records.push(toChange(row))
        if (rows.length > 0) last = exactInteger(rows[rows.length - 1]!.change)
        if (rows.length < CHANGES_PAGE) return { records, last }
      }
    })
  }

  recordLastUsed(lastUsed: Map<string, number>): Promise<void> {
    if (lastUsed.size === 0) return Promise.resolve()
    return writing(this.sql, async (tx) => {
      for (const [hash, at] of lastUsed) {
        const touched = await tx`UPDATE api_keys SET last_used_at = greatest(coalesce(last_used_at, 0), ${at}),
                                   secret_last_used_at = greatest(coalesce(secret_last_used_at, 0), ${at}) WHERE secret_hash = ${hash}`
        if (touched.count === 0)
          await tx`UPDATE api_keys SET last_used_at = greatest(coalesce(last_used_at, 0), ${at}),
                     previous_last_used_at = greatest(coalesce(previous_last_used_at, 0), ${at}) WHERE previous_secret_hash = ${hash}`
      }
    })
  }

  resetLimits(id: string, now: number): Promise<boolean> {
    return writing(this.sql, async (tx) => {
      if ((await tx`SELECT 1 FROM api_keys WHERE id = ${id} AND revoked_at IS NULL FOR UPDATE`).length === 0) return false
      // Sequence numbers visible in order, as for pet ids: a poll that has read past one never misses it.
      await tx`SELECT pg_advisory_xact_lock(${LOCKS.limitResets})`
      await tx`DELETE FROM limiter_state WHERE subject = ${keySubject(id).name}`
      await tx`INSERT INTO limit_resets (key_id, requested_at, seq) VALUES (${id}, ${now}, nextval('limit_resets_seq'))
               ON CONFLICT (key_id) DO UPDATE SET requested_at = EXCLUDED.requested_at, seq = EXCLUDED.seq`
      return true
    })
  }

  takeLimitResets(): Promise<LimitReset[]> {
    return guarded(async () => {
      const seen = this.resetsSeen
      const rows = (await this.sql`SELECT key_id, seq FROM limit_resets WHERE seq > ${seen ?? 0} ORDER BY seq`) as {
        key_id: string
        seq: string
      }[]
      if (rows.length > 0) this.resetsSeen = exactInteger(rows[rows.length - 1]!.seq)
      else this.resetsSeen ??= 0
      return seen === null ? [] : rows.map((row) => ({ keyId: row.key_id, seq: exactInteger(row.seq) }))
    })
  }

  /** Under the start-up lock, so instances that start together on an empty database make one key. */
  insertIfNone(r: ApiKeyRecord): Promise<boolean> {
    return writing(this.sql, async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(${LOCKS.schema})`
      if ((await tx`SELECT 1 FROM api_keys LIMIT 1`).length > 0) return false
      await insertKey(tx, r)
      return true
    })
  }
}
