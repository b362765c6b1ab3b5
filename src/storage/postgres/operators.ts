/**
 * The console's operators, their sessions and tokens, sign-in attempts and audit log in PostgreSQL,
 * shared by every instance: a session ended on one instance is refused by all of them at once.
 */
import type { Database } from './pool'
import { type AuditEntry, type Credential, type CredentialKind, type OperatorRecord, SIGN_IN_REFUSED, UNKNOWN_NAMES_ACTOR } from '../../domain/operators'
import type { OperatorRepository } from '../../domain/repositories'
import { guarded } from './failures'
import { LOCKS } from './migrations'
import { exactInteger } from './numbers'

/** The first key of the two-key advisory locks that count sign-in attempts ('PETS'); the second is a name's hash. */
const SIGN_IN_LOCK = 0x50455453

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

  /** The operator's row is locked first: a password reset (which updates it) and this come one after the other. */
  addCredential(hash: string, operator: string, kind: CredentialKind, now: number, checkedHash?: string): Promise<boolean> {
    return guarded(() =>
      this.sql.begin(async (tx) => {
        const [current] = (await tx`SELECT password_hash FROM operators WHERE name = ${operator} FOR UPDATE`) as { password_hash: string }[]
        if (!current || (checkedHash !== undefined && current.password_hash !== checkedHash)) return false
        if (kind === 'token') await tx`DELETE FROM operator_credentials WHERE operator = ${operator} AND kind = 'token'`
        await tx`INSERT INTO operator_credentials (hash, operator, kind, created_at, last_seen_at) VALUES (${hash}, ${operator}, ${kind}, ${now}, ${now})`
        return true
      }),
    )
  }

  credential(hash: string): Promise<Credential | null> {
    return guarded(async () => {
      const [row] = (await this.sql`SELECT operator, kind, last_seen_at FROM operator_credentials WHERE hash = ${hash}`) as {
        operator: string
        kind: CredentialKind
        last_seen_at: string
      }[]
      return row ? { operator: row.operator, kind: row.kind, lastSeenAt: exactInteger(row.last_seen_at) } : null
    })
  }

  touchCredential(hash: string, now: number, before: number): Promise<void> {
    return guarded(async () => {
      await this.sql`UPDATE operator_credentials SET last_seen_at = ${now} WHERE hash = ${hash} AND last_seen_at < ${before}`
    })
  }

  endCredential(hash: string): Promise<void> {
    return guarded(async () => {
      await this.sql`DELETE FROM operator_credentials WHERE hash = ${hash}`
    })
  }

  /** Under a transaction lock of the name (two-key advisory locks are apart from LOCKS): instances count one at a time. */
  reserveSignIn(name: string, at: number, since: number, limit: number): Promise<number | null> {
    return guarded(() =>
      this.sql.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${SIGN_IN_LOCK}::int, hashtext(${name}))`
        await tx`DELETE FROM sign_in_failures WHERE name = ${name} AND at <= ${since}`
        const times = ((await tx`SELECT at FROM sign_in_failures WHERE name = ${name} ORDER BY at`) as { at: string }[]).map((row) => exactInteger(row.at))
        if (times.length >= limit) return times[times.length - limit]!
        await tx`INSERT INTO sign_in_failures (name, at) VALUES (${name}, ${at})`
        return null
      }),
    )
  }

  releaseSignIn(name: string, at: number): Promise<void> {
    return guarded(async () => {
      await this.sql`DELETE FROM sign_in_failures WHERE ctid = (SELECT ctid FROM sign_in_failures WHERE name = ${name} AND at = ${at} LIMIT 1)`
    })
  }

  countUnknownSignIn(at: number, since: number): Promise<void> {
    return guarded(() =>
      this.sql.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${SIGN_IN_LOCK}::int, 0)`
        const [found] = (await tx`DELETE FROM audit_log WHERE id = (SELECT id FROM audit_log WHERE actor = ${UNKNOWN_NAMES_ACTOR}
                                   AND action = ${SIGN_IN_REFUSED} AND at >= ${since} ORDER BY id DESC LIMIT 1) RETURNING target`) as { target: string }[]
        const count = String(Number(found?.target ?? 0) + 1)
        await tx`INSERT INTO audit_log (at, actor, action, target) VALUES (${at}, ${UNKNOWN_NAMES_ACTOR}, ${SIGN_IN_REFUSED}, ${count})`
      }),
    )
  }

  prune(idleSince: number, failuresBefore: number, refusalsBefore: number): Promise<void> {
    return guarded(async () => {
      await this.sql`DELETE FROM operator_credentials WHERE kind = 'session' AND last_seen_at < ${idleSince}`
      await this.sql`DELETE FROM sign_in_failures WHERE at <= ${failuresBefore}`
      await this.sql`DELETE FROM audit_log WHERE action = ${SIGN_IN_REFUSED} AND at < ${refusalsBefore}`
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
