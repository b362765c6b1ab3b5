/**
 * The console's operators, their sessions and tokens, sign-in attempts and audit log in the data file.
 * Foreign keys are not enforced by SQLite here, so removing an operator deletes their credentials itself.
 */
import type { Database } from 'bun:sqlite'
import { type AuditEntry, type Credential, type CredentialKind, type OperatorRecord, SIGN_IN_REFUSED, UNKNOWN_NAMES_ACTOR } from '../../domain/operators'
import type { OperatorRepository } from '../../domain/repositories'
import { describeUnavailable } from './failures'

export class SqliteOperators implements OperatorRepository {
  constructor(private readonly db: Database) {}

  /** One write in an immediate transaction; a file that cannot be written answers as unavailable. */
  private write<T>(work: () => T): T {
    try {
      return this.db.transaction(work).immediate()
    } catch (error) {
      describeUnavailable(error)
    }
  }

  add(name: string, passwordHash: string, now: number): boolean {
    return this.write(
      () => this.db.query('INSERT OR IGNORE INTO operators (name, password_hash, created_at) VALUES (?, ?, ?)').run(name, passwordHash, now).changes === 1,
    )
  }

  addIfNone(name: string, passwordHash: string, now: number): boolean {
    return this.write(() => !this.db.query('SELECT 1 FROM operators LIMIT 1').get() && this.add(name, passwordHash, now))
  }

  list(): OperatorRecord[] {
    return this.db.query<OperatorRecord, []>('SELECT name, created_at AS createdAt FROM operators ORDER BY name').all()
  }

  passwordHash(name: string): string | null {
    return this.db.query<{ hash: string }, [string]>('SELECT password_hash AS hash FROM operators WHERE name = ?').get(name)?.hash ?? null
  }

  remove(name: string): boolean {
    return this.write(() => {
      this.db.query('DELETE FROM operator_credentials WHERE operator = ?').run(name)
      return this.db.query('DELETE FROM operators WHERE name = ?').run(name).changes === 1
    })
  }

  setPassword(name: string, passwordHash: string): boolean {
    return this.write(() => {
      if (this.db.query('UPDATE operators SET password_hash = ? WHERE name = ?').run(passwordHash, name).changes === 0) return false
      this.db.query("DELETE FROM operator_credentials WHERE operator = ? AND kind = 'session'").run(name)
      return true
    })
  }

  addCredential(hash: string, operator: string, kind: CredentialKind, now: number, checkedHash?: string): boolean {
    return this.write(() => {
      const current = this.db.query<{ hash: string }, [string]>('SELECT password_hash AS hash FROM operators WHERE name = ?').get(operator)
      if (!current || (checkedHash !== undefined && current.hash !== checkedHash)) return false
      if (kind === 'token') this.db.query("DELETE FROM operator_credentials WHERE operator = ? AND kind = 'token'").run(operator)
      this.db
        .query('INSERT INTO operator_credentials (hash, operator, kind, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?)')
        .run(hash, operator, kind, now, now)
      return true
    })
  }

  credential(hash: string): Credential | null {
    return this.db
      .query<Credential, [string]>('SELECT operator, kind, last_seen_at AS lastSeenAt FROM operator_credentials WHERE hash = ?')
      .get(hash)
  }

  touchCredential(hash: string, now: number, before: number): void {
    this.write(() => this.db.query('UPDATE operator_credentials SET last_seen_at = ? WHERE hash = ? AND last_seen_at < ?').run(now, hash, before))
  }

  endCredential(hash: string): void {
    this.write(() => this.db.query('DELETE FROM operator_credentials WHERE hash = ?').run(hash))
  }

  /** Counted and reserved in one immediate transaction: every handle on the file waits its turn. */
  reserveSignIn(name: string, at: number, since: number, limit: number): number | null {
    return this.write(() => {
      this.db.query('DELETE FROM sign_in_failures WHERE name = ? AND at <= ?').run(name, since)
      const times = this.db.query<{ at: number }, [string]>('SELECT at FROM sign_in_failures WHERE name = ? ORDER BY at').all(name)
      if (times.length >= limit) return times[times.length - limit]!.at
      this.db.query('INSERT INTO sign_in_failures (name, at) VALUES (?, ?)').run(name, at)
      return null
    })
  }

  releaseSignIn(name: string, at: number): void {
    this.write(() =>
      this.db.query('DELETE FROM sign_in_failures WHERE rowid = (SELECT rowid FROM sign_in_failures WHERE name = ? AND at = ? LIMIT 1)').run(name, at),
    )
  }

  countUnknownSignIn(at: number, since: number): void {
    this.write(() => {
      const found = this.db
        .query<{ id: number; target: string }, [string, string, number]>('SELECT id, target FROM audit_log WHERE actor = ? AND action = ? AND at >= ? ORDER BY id DESC LIMIT 1')
        .get(UNKNOWN_NAMES_ACTOR, SIGN_IN_REFUSED, since)
      if (found) this.db.query('DELETE FROM audit_log WHERE id = ?').run(found.id)
      this.db
        .query('INSERT INTO audit_log (at, actor, action, target) VALUES (?, ?, ?, ?)')
        .run(at, UNKNOWN_NAMES_ACTOR, SIGN_IN_REFUSED, String(Number(found?.target ?? 0) + 1))
    })
  }

  prune(idleSince: number, failuresBefore: number, refusalsBefore: number): void {
    this.write(() => {
      this.db.query("DELETE FROM operator_credentials WHERE kind = 'session' AND last_seen_at < ?").run(idleSince)
      this.db.query('DELETE FROM sign_in_failures WHERE at <= ?').run(failuresBefore)
      this.db.query('DELETE FROM audit_log WHERE action = ? AND at < ?').run(SIGN_IN_REFUSED, refusalsBefore)
    })
  }

  audit(entry: AuditEntry): void {
    this.write(() =>
      this.db.query('INSERT INTO audit_log (at, actor, action, target) VALUES (?, ?, ?, ?)').run(entry.at, entry.actor, entry.action, entry.target),
    )
  }

  auditLog(limit: number): AuditEntry[] {
    return this.db.query<AuditEntry, [number]>('SELECT at, actor, action, target FROM audit_log ORDER BY id DESC LIMIT ?').all(limit)
  }
}
