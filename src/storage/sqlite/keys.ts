/**
 * API keys, and `keys reset-limits` requests to a running server, in the data file. Every key change
 * takes the next `keys_change` number in its transaction; SQLite's one writer makes them visible in order.
 */
import type { Database } from 'bun:sqlite'
import type { ApiKeyRecord, KeyChange } from '../../domain/api-key'
import type { Limits } from '../../domain/plans'
import type { KeyChanges, KeyRepository, LimitReset, Revocation } from '../../domain/repositories'
import { keySubject } from '../../domain/subject'
import { writing } from './failures'

/** What a server reads of a key (KeyChange). */
const CHANGE_COLUMNS = `id, plan, rpm, rpd, secret_hash AS secretHash, revoked_at AS revokedAt, expires_at AS expiresAt,
  rolled_at AS rolledAt, previous_secret_hash AS previousSecretHash, previous_ends_at AS previousEndsAt`
const KEY_COLUMNS = `${CHANGE_COLUMNS}, name, created_at AS createdAt, last_used_at AS lastUsedAt,
  secret_last_used_at AS secretLastUsedAt, secret_format AS secretFormat, previous_last_used_at AS previousLastUsedAt`

/** The keys changed after a change number, in change order: a search of the index on `change`. */
export const KEY_CHANGES_SQL = `SELECT ${CHANGE_COLUMNS}, change FROM api_keys WHERE change > ? ORDER BY change`

type ChangeRow = KeyChange & { change: number }

// Statements are made at their first use (db.query keeps them): a file at an older schema, which a
// command only reads or copies, lacks the columns a newer statement names.
const INSERT_KEY = `INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at, expires_at, secret_format, change)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
const TOUCH_SECRET = `UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?1),
                        secret_last_used_at = max(coalesce(secret_last_used_at, 0), ?1) WHERE secret_hash = ?2`
const TOUCH_PREVIOUS = `UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?1),
                          previous_last_used_at = max(coalesce(previous_last_used_at, 0), ?1) WHERE previous_secret_hash = ?2`
const TAKE_CHANGE = "UPDATE meta SET value = value + 1 WHERE name = 'keys_change' RETURNING value"

export class SqliteKeys implements KeyRepository {
  constructor(private readonly db: Database) {}

  private takeChange(): number {
    return this.db.query<{ value: number }, []>(TAKE_CHANGE).get()!.value
  }

  insert(r: ApiKeyRecord): void {
    writing(this.db, () => {
      this.db
        .query(INSERT_KEY)
        .run(r.id, r.name, r.plan, r.rpm, r.rpd, r.secretHash, r.createdAt, r.expiresAt, r.secretFormat, this.takeChange())
    })
  }

  insertIfNone(record: ApiKeyRecord): boolean {
    return writing(this.db, () => {
      if (this.db.query('SELECT 1 FROM api_keys LIMIT 1').get()) return false
      this.insert(record)
      return true
    })
  }

  list(): ApiKeyRecord[] {
    return this.db.query<ApiKeyRecord, []>(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`).all()
  }

  get(id: string): ApiKeyRecord | null {
    return this.db.query<ApiKeyRecord, [string]>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`).get(id)
  }

  /** A key already revoked keeps its time and takes no change number. */
  revoke(id: string, now: number): Revocation {
    return writing(this.db, () => {
      const key = this.db.query<{ revokedAt: number | null }, [string]>('SELECT revoked_at AS revokedAt FROM api_keys WHERE id = ?').get(id)
      if (key === null) return 'no-key'
      if (key.revokedAt !== null) return 'already-revoked'
      this.db.query('UPDATE api_keys SET revoked_at = ?, change = ? WHERE id = ?').run(now, this.takeChange(), id)
      return 'revoked'
    })
  }

  setPlan(id: string, plan: ApiKeyRecord['plan'], limits: Limits): boolean {
    return writing(this.db, () => {
      const active = this.db.query('SELECT 1 FROM api_keys WHERE id = ? AND revoked_at IS NULL').get(id)
      if (active)
        this.db
          .query('UPDATE api_keys SET plan = ?, rpm = ?, rpd = ?, change = ? WHERE id = ?')
          .run(plan, limits.rpm, limits.rpd, this.takeChange(), id)
      return active !== null
    })
  }

  setExpiry(id: string, expiresAt: number | null): boolean {
    return writing(this.db, () => {
      const active = this.db.query('SELECT 1 FROM api_keys WHERE id = ? AND revoked_at IS NULL').get(id)
      if (active) this.db.query('UPDATE api_keys SET expires_at = ?, change = ? WHERE id = ?').run(expiresAt, this.takeChange(), id)
      return active !== null
    })
  }

  roll(id: string, secretHash: string, now: number, previousEndsAt: number): boolean {
    return writing(this.db, () => {
      const active = this.db.query('SELECT 1 FROM api_keys WHERE id = ? AND revoked_at IS NULL').get(id)
      if (active)
        this.db
          .query(
            `UPDATE api_keys SET previous_secret_hash = secret_hash, previous_last_used_at = secret_last_used_at, previous_ends_at = ?,
                                 secret_hash = ?, secret_last_used_at = NULL, secret_format = 'checked', rolled_at = ?, change = ?
             WHERE id = ?`,
          )
          .run(previousEndsAt, secretHash, now, this.takeChange(), id)
      return active !== null
    })
  }

  changesSince(after: number): KeyChanges {
    const rows = this.db.query<ChangeRow, [number]>(KEY_CHANGES_SQL).all(after)
    return { records: rows.map(({ change: _, ...key }) => key), last: rows.at(-1)?.change ?? after }
  }

  resetLimits(id: string, now: number): boolean {
    return writing(this.db, () => {
      if (!this.db.query('SELECT 1 FROM api_keys WHERE id = ? AND revoked_at IS NULL').get(id)) return false
      this.db.query('DELETE FROM limiter_state WHERE subject = ?').run(keySubject(id).name)
      this.db.query('INSERT OR REPLACE INTO limit_resets (key_id, requested_at) VALUES (?, ?)').run(id, now)
      return true
    })
  }

  takeLimitResets(): LimitReset[] {
    const pending = this.db.query<{ keyId: string }, []>('SELECT key_id AS keyId FROM limit_resets')
    if (!pending.get()) return []
    // Taken and cleared together, with any day bucket the server saved since the reset was asked for.
    return this.db
      .transaction(() => {
        const ids = pending.all().map((row) => row.keyId)
        for (const id of ids) {
          this.db.query('DELETE FROM limiter_state WHERE subject = ?').run(keySubject(id).name)
          this.db.query('DELETE FROM limit_resets WHERE key_id = ?').run(id)
        }
        return ids.map((keyId) => ({ keyId, seq: null }))
      })
      .immediate()
  }

  recordLastUsed(lastUsed: Map<string, number>): void {
    if (lastUsed.size === 0) return
    this.db
      .transaction(() => {
        for (const [hash, at] of lastUsed)
          if (this.db.query(TOUCH_SECRET).run(at, hash).changes === 0) this.db.query(TOUCH_PREVIOUS).run(at, hash)
      })
      .immediate()
  }
}
