/** API keys, and the requests from `keys reset-limits` to a running server, in the data file. */
import type { Database, Statement } from 'bun:sqlite'
import type { ApiKeyRecord, KeyRepository, LimitReset } from '../types'
import { describeUnavailable } from './errors'

interface KeyRow {
  id: string
  name: string
  plan: ApiKeyRecord['plan']
  rpm: number
  rpd: number
  secretHash: string
  createdAt: number
  lastUsedAt: number | null
  revokedAt: number | null
}

const KEY_COLUMNS =
  'id, name, plan, rpm, rpd, secret_hash AS secretHash, created_at AS createdAt, last_used_at AS lastUsedAt, revoked_at AS revokedAt'


export class SqliteKeys implements KeyRepository {
  private readonly insertKey: Statement<unknown, [string, string, string, number, number, string, number]>
  private readonly listKeys: Statement<KeyRow, []>
  private readonly revokeKey: Statement<unknown, [number, string]>
  private readonly touchKey: Statement<unknown, [number, string]>
  private readonly countKeys: Statement<{ keys: number; revoked: number }, []>

  constructor(private readonly db: Database) {
    this.insertKey = db.query(
      'INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    )
    this.listKeys = db.query(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`)
    this.revokeKey = db.query('UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?')
    this.touchKey = db.query(
      'UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?',
    )
    this.countKeys = db.query('SELECT count(*) AS keys, count(revoked_at) AS revoked FROM api_keys')
  }

  insert(r: ApiKeyRecord): void {
    try {
      this.insertKey.run(r.id, r.name, r.plan, r.rpm, r.rpd, r.secretHash, r.createdAt)
    } catch (error) {
      describeUnavailable(error)
    }
  }

  insertIfNone(record: ApiKeyRecord): boolean {
    try {
      return this.db.transaction(() => {
        if (this.db.query('SELECT 1 FROM api_keys LIMIT 1').get()) return false
        this.insert(record)
        return true
      }).immediate()
    } catch (error) {
      describeUnavailable(error)
    }
  }

  list(): ApiKeyRecord[] {
    return this.listKeys.all()
  }

  revoke(id: string, now: number): boolean {
    try {
      return this.revokeKey.run(now, id).changes > 0
    } catch (error) {
      describeUnavailable(error)
    }
  }

  /** Keys are never deleted and a revocation is never undone, so the two counts only grow with each change. */
  changeMark(): string {
    const { keys, revoked } = this.countKeys.get()!
    return `${keys}:${revoked}`
  }

  resetLimits(id: string, now: number): boolean {
    try {
      return this.db.transaction(() => {
        if (!this.db.query('SELECT 1 FROM api_keys WHERE id = ?').get(id)) return false
        this.db.query('DELETE FROM limiter_state WHERE subject = ?').run(`key:${id}`)
        this.db.query('INSERT OR REPLACE INTO limit_resets (key_id, requested_at) VALUES (?, ?)').run(id, now)
        return true
      }).immediate()
    } catch (error) {
      describeUnavailable(error)
    }
  }

  takeLimitResets(): LimitReset[] {
    const pending = this.db.query<{ keyId: string }, []>('SELECT key_id AS keyId FROM limit_resets')
    if (!pending.get()) return []
    // Taken and cleared together, with any day bucket the server saved since the reset was asked for.
    return this.db.transaction(() => {
      const ids = pending.all().map((row) => row.keyId)
      for (const id of ids) {
        this.db.query('DELETE FROM limiter_state WHERE subject = ?').run(`key:${id}`)
        this.db.query('DELETE FROM limit_resets WHERE key_id = ?').run(id)
      }
      return ids.map((keyId) => ({ keyId, seq: null }))
    }).immediate()
  }

  recordLastUsed(lastUsed: Map<string, number>): void {
    if (lastUsed.size === 0) return
    this.db.transaction(() => {
      for (const [id, at] of lastUsed) this.touchKey.run(at, id)
    }).immediate()
  }
}
