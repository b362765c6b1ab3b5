/**
 * API keys, and `keys reset-limits` requests to a running server, in the data file. Every key change
 * takes the next `keys_change` number in its transaction; SQLite's one writer makes them visible in order.
 */
import type { Database, Statement } from 'bun:sqlite'
import type { ApiKeyRecord, KeyChange } from '../../domain/api-key'
import type { Limits } from '../../domain/plans'
import type { KeyChanges, KeyRepository, LimitReset, Revocation } from '../../domain/repositories'
import { keySubject } from '../../domain/subject'
import { writing } from './failures'

const KEY_COLUMNS =
  'id, name, plan, rpm, rpd, secret_hash AS secretHash, created_at AS createdAt, last_used_at AS lastUsedAt, revoked_at AS revokedAt'

/** The keys changed after a change number, in change order: a search of the index on `change`. */
export const KEY_CHANGES_SQL = `SELECT id, plan, rpm, rpd, secret_hash AS secretHash, revoked_at AS revokedAt, change
                                FROM api_keys WHERE change > ? ORDER BY change`

type ChangeRow = KeyChange & { change: number }

export class SqliteKeys implements KeyRepository {
  private readonly insertKey: Statement<unknown, [string, string, string, number, number, string, number, number]>
  private readonly listKeys: Statement<ApiKeyRecord, []>
  private readonly getKey: Statement<ApiKeyRecord, [string]>
  private readonly revokeKey: Statement<unknown, [number, number, string]>
  private readonly touchKey: Statement<unknown, [number, string]>
  private readonly changedKeys: Statement<ChangeRow, [number]>
  private readonly takeChange: Statement<{ value: number }, []>

  constructor(private readonly db: Database) {
    this.insertKey = db.query(
      'INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at, change) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    )
    this.listKeys = db.query(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`)
    this.getKey = db.query(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`)
    this.revokeKey = db.query('UPDATE api_keys SET revoked_at = ?, change = ? WHERE id = ?')
    this.touchKey = db.query('UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?')
    this.changedKeys = db.query(KEY_CHANGES_SQL)
    this.takeChange = db.query("UPDATE meta SET value = value + 1 WHERE name = 'keys_change' RETURNING value")
  }

  insert(r: ApiKeyRecord): void {
    writing(this.db, () => {
      this.insertKey.run(r.id, r.name, r.plan, r.rpm, r.rpd, r.secretHash, r.createdAt, this.takeChange.get()!.value)
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
    return this.listKeys.all()
  }

  get(id: string): ApiKeyRecord | null {
    return this.getKey.get(id)
  }

  /** A key already revoked keeps its time and takes no change number. */
  revoke(id: string, now: number): Revocation {
    return writing(this.db, () => {
      const key = this.db.query<{ revokedAt: number | null }, [string]>('SELECT revoked_at AS revokedAt FROM api_keys WHERE id = ?').get(id)
      if (key === null) return 'no-key'
      if (key.revokedAt !== null) return 'already-revoked'
      this.revokeKey.run(now, this.takeChange.get()!.value, id)
      return 'revoked'
    })
  }

  setPlan(id: string, plan: ApiKeyRecord['plan'], limits: Limits): boolean {
    return writing(this.db, () => {
      const active = this.db.query('SELECT 1 FROM api_keys WHERE id = ? AND revoked_at IS NULL').get(id)
      if (active)
        this.db
          .query('UPDATE api_keys SET plan = ?, rpm = ?, rpd = ?, change = ? WHERE id = ?')
          .run(plan, limits.rpm, limits.rpd, this.takeChange.get()!.value, id)
      return active !== null
    })
  }

  changesSince(after: number): KeyChanges {
    const rows = this.changedKeys.all(after)
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
        for (const [id, at] of lastUsed) this.touchKey.run(at, id)
      })
      .immediate()
  }
}
