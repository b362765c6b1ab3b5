/**
 * The console's operators, their sessions and tokens, failed sign-ins and audit log in PostgreSQL,
 * shared by every instance: a session ended on one instance is refused by all of them at once.
 */
import type { Database } from './pool'
import type { AuditEntry, Credential, CredentialKind, OperatorRecord } from '../../domain/operators'
import type { OperatorRepository } from '../../domain/repositories'
import { guarded } from './failures'
import { LOCKS } from './migrations'
import { exactInteger } from './numbers'

export class PostgresOperators implements OperatorRepository {
  constructor(private readonly sql: Database) {}

  add(name: string, passwordHash: string, now: number): Promise<boolean> {
    return guarded(async () => {
      const rows = await this.sql`INSERT INTO operators (name, password_hash, created_at) VALUES (${name}, ${passwordHash}, ${now})
                                  ON CONFLICT (name) DO NOTHING RETURNING name`
      return rows.length === 1
    })
  }

  /** Under the start-up lock, so instances that start together on an empty database make one operator. */
  addIfNone(name: string, passwordHash: string, now: number): Promise<boolean> {
    return guarded(() =>
      this.sql.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${LOCKS.schema})`
        if ((await tx`SELECT 1 FROM operators LIMIT 1`).length > 0) return false
        await tx`INSERT INTO operators (name, password_hash, created_at) VALUES (${name}, ${passwordHash}, ${now})`
        return true
      }),
    )
  }

  list(): Promise<OperatorRecord[]> {
    return guarded(async () => {
      const rows = (await this.sql`SELECT name, created_at FROM operators ORDER BY name`) as { name: string; created_at: string }[]
      return rows.map((row) => ({ name: row.name, createdAt: exactInteger(row.created_at) }))
    })
  }

  passwordHash(name: string): Promise<string | null> {
    return guarded(async () => {
      const [row] = (await this.sql`SELECT password_hash FROM operators WHERE name = ${name}`) as { password_hash: string }[]
      return row?.password_hash ?? null
    })
  }

  remove(name: string): Promise<boolean> {
    return guarded(async () => (await this.sql`DELETE FROM operators WHERE name = ${name} RETURNING name`).length === 1)
  }

  setPassword(name: string, passwordHash: string): Promise<boolean> {
    return guarded(() =>
      this.sql.begin(async (tx) => {
        if ((await tx`UPDATE operators SET password_hash = ${passwordHash} WHERE name = ${name} RETURNING name`).length === 0) return false
        await tx`DELETE FROM operator_credentials WHERE operator = ${name} AND kind = 'session'`
        return true
      }),
    )
  }

  addCredential(hash: string, operator: string, kind: CredentialKind, now: number): Promise<boolean> {
    return guarded(() =>
      this.sql.begin(async (tx) => {
        if ((await tx`SELECT 1 FROM operators WHERE name = ${operator} FOR UPDATE`).length === 0) return false
        if (kind === 'token') await tx`DELETE FROM operator_credentials WHERE operator = ${operator} AND kind = 'token'`
        await tx`INSERT INTO operator_credentials (hash, operator, kind, created_at, last_seen_at) VALUES (${hash}, ${operator}, ${kind}, ${now}, ${now})`
        return true
      }),
    )
  }

  /** One statement: a session idle too long is deleted and not returned; any other is touched and returned. */
  useCredential(hash: string, now: number, idleSince: number): Promise<Credential | null> {
    return guarded(async () => {
      await this.sql`DELETE FROM operator_credentials WHERE hash = ${hash} AND kind = 'session' AND last_seen_at < ${idleSince}`
      const [row] = (await this.sql`UPDATE operator_credentials SET last_seen_at = greatest(last_seen_at, ${now})
                                    WHERE hash = ${hash} RETURNING operator, kind, last_seen_at`) as {
        operator: string
        kind: CredentialKind
        last_seen_at: string
      }[]
      return row ? { operator: row.operator, kind: row.kind, lastSeenAt: exactInteger(row.last_seen_at) } : null
    })
  }

  endCredential(hash: string): Promise<void> {
    return guarded(async () => {
      await this.sql`DELETE FROM operator_credentials WHERE hash = ${hash}`
    })
  }

  failedSignIns(name: string, since: number): Promise<number[]> {
    return guarded(async () => {
      await this.sql`DELETE FROM sign_in_failures WHERE at <= ${since}`
      const rows = (await this.sql`SELECT at FROM sign_in_failures WHERE name = ${name} ORDER BY at`) as { at: string }[]
      return rows.map((row) => exactInteger(row.at))
    })
  }

  recordFailedSignIn(name: string, at: number): Promise<void> {
    return guarded(async () => {
      await this.sql`INSERT INTO sign_in_failures (name, at) VALUES (${name}, ${at})`
    })
  }

  clearFailedSignIns(name: string): Promise<void> {
    return guarded(async () => {
      await this.sql`DELETE FROM sign_in_failures WHERE name = ${name}`
    })
  }

  audit(entry: AuditEntry): Promise<void> {
    return guarded(async () => {
      await this.sql`INSERT INTO audit_log (at, actor, action, target) VALUES (${entry.at}, ${entry.actor}, ${entry.action}, ${entry.target})`
    })
  }

  auditLog(limit: number): Promise<AuditEntry[]> {
    return guarded(async () => {
      const rows = (await this.sql`SELECT at, actor, action, target FROM audit_log ORDER BY id DESC LIMIT ${limit}`) as (Omit<AuditEntry, 'at'> & { at: string })[]
      return rows.map((row) => ({ ...row, at: exactInteger(row.at) }))
    })
  }
}
