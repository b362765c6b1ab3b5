/**
 * The console's operators, their sessions and tokens, sign-in attempts and audit log, for both engines.
 * In storage shared by every instance (on PostgreSQL): a session ended on one is refused by all at once.
 * An operator's credentials are deleted with them here, since SQLite does not enforce foreign keys.
 */
import {
  type AuditEntry,
  type Credential,
  type CredentialKind,
  type OperatorRecord,
  SIGN_IN_REFUSED,
  UNKNOWN_NAMES_ACTOR,
} from '../../domain/operators'
import type { OperatorRepository, PasswordHashes, SignInThrottle } from '../../domain/repositories'
import { exactInteger } from './numbers'
import { type Answer, changes, FOR_UPDATE, type Integer, lock, type Mode, ROW_ID, rows, type Runner, sql, type Written } from './sql'

type AuditRow = Omit<AuditEntry, 'at'> & { at: Integer }

export class SqlOperators<M extends Mode> implements OperatorRepository {
  constructor(private readonly db: Runner<M>) {}

  add(name: string, passwordHash: string, now: number): Written<M, boolean> {
    return this.db.write(function* () {
      return (
        (yield* changes(sql`INSERT INTO operators (name, password_hash, created_at) VALUES (${name}, ${passwordHash}, ${now})
                                 ON CONFLICT (name) DO NOTHING`)) === 1
      )
    })
  }

  /** Under the start-up lock, so instances that start together on an empty database make one operator. */
  addIfNone(name: string, passwordHash: string, now: number): Written<M, boolean> {
    return this.db.write(function* () {
      yield* lock({ of: 'schema' })
      if ((yield* rows(sql`SELECT 1 FROM operators LIMIT 1`)).length > 0) return false
      yield* changes(sql`INSERT INTO operators (name, password_hash, created_at) VALUES (${name}, ${passwordHash}, ${now})`)
      return true
    })
  }

  list(): Answer<M, OperatorRecord[]> {
    return this.db.read(function* () {
      const found = yield* rows<{ name: string; created_at: Integer }>(sql`SELECT name, created_at FROM operators ORDER BY name`)
      return found.map((row) => ({ name: row.name, createdAt: exactInteger(row.created_at) }))
    })
  }

  passwordHashes(name: string): Answer<M, PasswordHashes> {
    return this.db.read(function* () {
      const [row] = yield* rows<{ hash: string | null; oldest: string | null }>(
        sql`SELECT (SELECT password_hash FROM operators WHERE name = ${name}) AS hash,
                   (SELECT password_hash FROM operators ORDER BY created_at, name LIMIT 1) AS oldest`,
      )
      return { hash: row?.hash ?? null, oldest: row?.oldest ?? null }
    })
  }

  remove(name: string): Written<M, boolean> {
    return this.db.write(function* () {
      yield* changes(sql`DELETE FROM operator_credentials WHERE operator = ${name}`)
      return (yield* changes(sql`DELETE FROM operators WHERE name = ${name}`)) === 1
    })
  }

  setPassword(name: string, passwordHash: string): Written<M, boolean> {
    return this.db.write(function* () {
      if ((yield* changes(sql`UPDATE operators SET password_hash = ${passwordHash} WHERE name = ${name}`)) === 0) return false
      yield* changes(sql`DELETE FROM operator_credentials WHERE operator = ${name} AND kind = 'session'`)
      return true
    })
  }

  /** The operator's row is read for update: a password reset (which updates it) and this come one after the other. */
  addCredential(hash: string, operator: string, kind: CredentialKind, now: number, checkedHash?: string): Written<M, boolean> {
    return this.db.write(function* () {
      const [current] = yield* rows<{ password_hash: string }>(
        sql`SELECT password_hash FROM operators WHERE name = ${operator} ${FOR_UPDATE}`,
      )
      if (!current || (checkedHash !== undefined && current.password_hash !== checkedHash)) return false
      if (kind === 'token') yield* changes(sql`DELETE FROM operator_credentials WHERE operator = ${operator} AND kind = 'token'`)
      yield* changes(
        sql`INSERT INTO operator_credentials (hash, operator, kind, created_at, last_seen_at) VALUES (${hash}, ${operator}, ${kind}, ${now}, ${now})`,
      )
      return true
    })
  }

  credential(hash: string): Answer<M, Credential | null> {
    return this.db.read(function* () {
      const [row] = yield* rows<{ operator: string; kind: CredentialKind; last_seen_at: Integer }>(
        sql`SELECT operator, kind, last_seen_at FROM operator_credentials WHERE hash = ${hash}`,
      )
      return row ? { operator: row.operator, kind: row.kind, lastSeenAt: exactInteger(row.last_seen_at) } : null
    })
  }

  touchCredential(hash: string, now: number, before: number): Written<M, void> {
    return this.db.write(function* () {
      yield* changes(sql`UPDATE operator_credentials SET last_seen_at = ${now} WHERE hash = ${hash} AND last_seen_at < ${before}`)
    })
  }

  endCredential(hash: string): Written<M, void> {
    return this.db.write(function* () {
      yield* changes(sql`DELETE FROM operator_credentials WHERE hash = ${hash}`)
    })
  }

  /** Counted and reserved under the name's lock: every handle and every instance counts one at a time. */
  reserveSignIn(name: string, at: number, throttle: SignInThrottle): Written<M, number | null> {
    return this.db.write(function* () {
      yield* lock({ of: 'sign-in', name })
      yield* changes(sql`DELETE FROM sign_in_failures WHERE name = ${name} AND at <= ${throttle.since}`)
      const attempts = yield* rows<{ at: Integer; address: string }>(
        sql`SELECT at, address FROM sign_in_failures WHERE name = ${name} ORDER BY at DESC`,
      )
      const blocking = blockingAttempt(attempts, throttle)
      if (blocking === null)
        yield* changes(sql`INSERT INTO sign_in_failures (name, at, address) VALUES (${name}, ${at}, ${throttle.address})`)
      return blocking
    })
  }

  signInBlocked(name: string, throttle: SignInThrottle): Answer<M, number | null> {
    return this.db.read(function* () {
      const attempts = yield* rows<{ at: Integer; address: string }>(
        sql`SELECT at, address FROM sign_in_failures WHERE name = ${name} AND at > ${throttle.since} ORDER BY at DESC LIMIT ${throttle.perName}`,
      )
      return blockingAttempt(attempts, throttle)
    })
  }

  releaseSignIn(name: string, at: number): Written<M, void> {
    return this.db.write(function* () {
      yield* changes(
        sql`DELETE FROM sign_in_failures WHERE ${ROW_ID} = (SELECT ${ROW_ID} FROM sign_in_failures WHERE name = ${name} AND at = ${at} LIMIT 1)`,
      )
    })
  }

  countUnknownSignIn(at: number, since: number): Written<M, void> {
    return this.db.write(function* () {
      yield* lock({ of: 'sign-in', name: null })
      const [found] = yield* rows<{
        target: string
      }>(sql`DELETE FROM audit_log WHERE id = (SELECT id FROM audit_log WHERE actor = ${UNKNOWN_NAMES_ACTOR}
                                                        AND action = ${SIGN_IN_REFUSED} AND at >= ${since} ORDER BY id DESC LIMIT 1) RETURNING target`)
      const count = String(Number(found?.target ?? 0) + 1)
      yield* changes(
        sql`INSERT INTO audit_log (at, actor, action, target) VALUES (${at}, ${UNKNOWN_NAMES_ACTOR}, ${SIGN_IN_REFUSED}, ${count})`,
      )
    })
  }

  prune(idleSince: number, failuresBefore: number, refusalsBefore: number): Written<M, void> {
    return this.db.write(function* () {
      yield* changes(sql`DELETE FROM operator_credentials WHERE kind = 'session' AND last_seen_at < ${idleSince}`)
      yield* changes(sql`DELETE FROM sign_in_failures WHERE at <= ${failuresBefore}`)
      yield* changes(sql`DELETE FROM audit_log WHERE action = ${SIGN_IN_REFUSED} AND at < ${refusalsBefore}`)
    })
  }

  audit(entry: AuditEntry): Written<M, void> {
    return this.db.write(function* () {
      yield* changes(
        sql`INSERT INTO audit_log (at, actor, action, target) VALUES (${entry.at}, ${entry.actor}, ${entry.action}, ${entry.target})`,
      )
    })
  }

  auditLog(limit: number): Answer<M, AuditEntry[]> {
    return this.db.read(function* () {
      const found = yield* rows<AuditRow>(sql`SELECT at, actor, action, target FROM audit_log ORDER BY id DESC LIMIT ${limit}`)
      return found.map((row) => ({ ...row, at: exactInteger(row.at) }))
    })
  }
}

/**
 * Of a name's attempts still counted, newest first (at most perName of them are ever kept), the time of the
 * one whose leaving the window frees a place: the later of its address's and the name's, else null.
 */
function blockingAttempt(attempts: { at: Integer; address: string }[], throttle: SignInThrottle): number | null {
  let blocking: number | null = null
  if (attempts.length >= throttle.perName) blocking = exactInteger(attempts[throttle.perName - 1]!.at)
  const fromAddress = attempts.filter((attempt) => attempt.address === throttle.address)
  if (fromAddress.length >= throttle.perAddress) blocking = Math.max(blocking ?? 0, exactInteger(fromAddress[throttle.perAddress - 1]!.at))
  return blocking
}
