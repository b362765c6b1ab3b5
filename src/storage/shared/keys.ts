/**
 * API keys, for both engines. Every key change takes the next change number under the key-changes lock,
 * so the numbers become visible in order and a server reads only what changed past the last it saw.
 */
import type { ApiKeyRecord, KeyChange } from '../../domain/api-key'
import type { Limits } from '../../domain/plans'
import type { KeyChanges, KeyRepository, LimitReset, Revocation } from '../../domain/repositories'
import { keySubject } from '../../domain/subject'
import type { LimitResets } from './limit-resets'
import { exactInteger } from './numbers'
import type { Answer, Integer, Mode, Runner, Statement, Work, Written } from './sql'
import { changes, FOR_UPDATE, GREATEST, lock, rows, sql, Words } from './sql'

/** What a server reads of a key (KeyChange), named as the domain names it (quoted: PostgreSQL would fold the case). */
const CHANGE_COLUMNS = `id, plan, rpm, rpd, secret_hash AS "secretHash", revoked_at AS "revokedAt", expires_at AS "expiresAt",
  rolled_at AS "rolledAt", previous_secret_hash AS "previousSecretHash", previous_ends_at AS "previousEndsAt"`
const KEY_COLUMNS = new Words(`${CHANGE_COLUMNS}, name, created_at AS "createdAt", last_used_at AS "lastUsedAt",
  secret_last_used_at AS "secretLastUsedAt", secret_format AS "secretFormat", previous_last_used_at AS "previousLastUsedAt"`)
/** The fields that are integers: PostgreSQL sends their digits. */
const INTEGERS = 'rpm rpd revokedAt expiresAt rolledAt previousEndsAt createdAt lastUsedAt secretLastUsedAt previousLastUsedAt'.split(' ')

/** Rows per read of changed keys: without statistics (after a bulk import) PostgreSQL plans an unbounded read as a scan of every key. */
const CHANGES_PAGE = 10_000
// Written in, not bound: SQLite runs the read about 5 µs slower with a bound LIMIT of 10,000.
const PAGE_LIMIT = new Words(String(CHANGES_PAGE))

/** The keys changed after change number `after`, in change order: a search of the index on `change`. */
export const keyChangesAfter = (after: number) =>
  sql`SELECT ${new Words(CHANGE_COLUMNS)}, change FROM api_keys WHERE change > CAST(${after} AS bigint) ORDER BY change LIMIT ${PAGE_LIMIT}`

/** The next key change number: SQLite keeps it in meta, PostgreSQL in a sequence. */
const NEXT_CHANGE = new Words(
  "UPDATE meta SET value = value + 1 WHERE name = 'keys_change' RETURNING value",
  "SELECT nextval('api_keys_change_seq') AS value",
)

/** A key's row with its integers as numbers (in place). */
function exact<T>(row: Record<string, unknown>): T {
  for (const field of INTEGERS) if (row[field] != null) row[field] = exactInteger(row[field] as Integer)
  return row as T
}

function* takeChange(): Work<Integer> {
  yield* lock({ of: 'key-changes' })
  const [row] = yield* rows<{ value: Integer }>(sql`${NEXT_CHANGE}`)
  return row!.value
}

function* insertKey(r: ApiKeyRecord): Work<void> {
  yield* changes(sql`INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at, expires_at, secret_format, change)
                     VALUES (${r.id}, ${r.name}, ${r.plan}, ${r.rpm}, ${r.rpd}, ${r.secretHash}, ${r.createdAt}, ${r.expiresAt},
                             ${r.secretFormat}, ${yield* takeChange()})`)
}

/** Whether the key exists and is not revoked, its row locked until the commit. */
function* isActive(id: string): Work<boolean> {
  return (yield* rows(sql`SELECT 1 FROM api_keys WHERE id = ${id} AND revoked_at IS NULL ${FOR_UPDATE}`)).length > 0
}

/**
 * Sets `fields` of a key that is not revoked, with the next change number, after `before` (which sees the
 * key as it was); false when none or revoked.
 */
function* changeActive(id: string, fields: (change: Integer) => Statement, before?: Statement): Work<boolean> {
  if (!(yield* isActive(id))) return false
  if (before) yield* changes(before)
  yield* changes(sql`UPDATE api_keys SET ${fields(yield* takeChange())} WHERE id = ${id}`)
  return true
}

const SECRET = { hash: new Words('secret_hash'), used: new Words('secret_last_used_at') }
const PREVIOUS_SECRET = { hash: new Words('previous_secret_hash'), used: new Words('previous_last_used_at') }

/** Moves the last use of the key holding `hash` as `secret`, and of that secret, up to `at`. */
const touch = (secret: typeof SECRET, hash: string, at: number) =>
  sql`UPDATE api_keys SET last_used_at = ${GREATEST}(coalesce(last_used_at, 0), ${at}),
                          ${secret.used} = ${GREATEST}(coalesce(${secret.used}, 0), ${at}) WHERE ${secret.hash} = ${hash}`

export class SqlKeys<M extends Mode> implements KeyRepository {
  constructor(
    private readonly db: Runner<M>,
    private readonly resets: LimitResets<M>,
  ) {}

  insert(record: ApiKeyRecord): Written<M, void> {
    return this.db.write(() => insertKey(record))
  }

  /** Under the start-up lock, so instances that start together on an empty database make one key. */
  insertIfNone(record: ApiKeyRecord): Written<M, boolean> {
    return this.db.write(function* () {
      yield* lock({ of: 'schema' })
      if ((yield* rows(sql`SELECT 1 FROM api_keys LIMIT 1`)).length > 0) return false
      yield* insertKey(record)
      return true
    })
  }

  list(): Answer<M, ApiKeyRecord[]> {
    return this.db.read(function* () {
      const found = yield* rows<Record<string, unknown>>(sql`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`)
      return found.map(exact<ApiKeyRecord>)
    })
  }

  get(id: string): Answer<M, ApiKeyRecord | null> {
    return this.db.read(function* () {
      const [row] = yield* rows<Record<string, unknown>>(sql`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ${id}`)
      return row ? exact<ApiKeyRecord>(row) : null
    })
  }

  /** A key already revoked keeps its time and takes no change number. */
  revoke(id: string, now: number): Written<M, Revocation> {
    return this.db.write(function* () {
      const [key] = yield* rows<{ revoked_at: Integer | null }>(sql`SELECT revoked_at FROM api_keys WHERE id = ${id} ${FOR_UPDATE}`)
      if (key === undefined) return 'no-key'
      if (key.revoked_at !== null) return 'already-revoked'
      yield* changes(sql`UPDATE api_keys SET revoked_at = ${now}, change = ${yield* takeChange()} WHERE id = ${id}`)
      return 'revoked'
    })
  }

  setPlan(id: string, plan: ApiKeyRecord['plan'], limits: Limits): Written<M, boolean> {
    // Other limits start the buckets afresh, as a running server starts them: a saved day bucket says
    // the limits it was counted under, but one saved before they were kept says none, and goes.
    const forgetUnlabelled = sql`DELETE FROM limiter_state WHERE limiter_state.subject = ${keySubject(id).name} AND limiter_state.rpm IS NULL
      AND EXISTS (SELECT 1 FROM api_keys WHERE api_keys.id = ${id} AND (api_keys.rpm <> ${limits.rpm} OR api_keys.rpd <> ${limits.rpd}))`
    return this.db.write(() =>
      changeActive(id, (change) => sql`plan = ${plan}, rpm = ${limits.rpm}, rpd = ${limits.rpd}, change = ${change}`, forgetUnlabelled),
    )
  }

  setExpiry(id: string, expiresAt: number | null): Written<M, boolean> {
    return this.db.write(() => changeActive(id, (change) => sql`expires_at = ${expiresAt}, change = ${change}`))
  }

  roll(id: string, secretHash: string, now: number, previousEndsAt: number): Written<M, boolean> {
    const fields = (change: Integer) =>
      sql`previous_secret_hash = secret_hash, previous_last_used_at = secret_last_used_at, previous_ends_at = ${previousEndsAt},
          secret_hash = ${secretHash}, secret_last_used_at = NULL, secret_format = 'checked', rolled_at = ${now}, change = ${change}`
    return this.db.write(() => changeActive(id, fields))
  }

  /** Read in pages (see CHANGES_PAGE); numbers are unique and visible in order. */
  changesSince(after: number): Answer<M, KeyChanges> {
    return this.db.read(function* () {
      const records: KeyChange[] = []
      for (let last = after; ; ) {
        const found = yield* rows<KeyChange & { change: Integer }>(keyChangesAfter(last))
        for (const { change, ...key } of found) {
          records.push(exact(key))
          last = exactInteger(change)
        }
        if (found.length < CHANGES_PAGE) return { records, last }
      }
    })
  }

  /** A secret's use is the newest's or the previous one's, never both (their hashes differ). */
  recordLastUsed(lastUsed: Map<string, number>): Written<M, void> {
    return this.db.write(function* () {
      for (const [hash, at] of lastUsed)
        if ((yield* changes(touch(SECRET, hash, at))) === 0) yield* changes(touch(PREVIOUS_SECRET, hash, at))
    })
  }

  resetLimits(id: string, now: number): Written<M, boolean> {
    const { resets } = this
    return this.db.write(function* () {
      if (!(yield* isActive(id))) return false
      yield* changes(sql`DELETE FROM limiter_state WHERE subject = ${keySubject(id).name}`)
      yield* resets.ask(id, now)
      return true
    })
  }

  takeLimitResets(): Written<M, LimitReset[]> {
    return this.resets.take()
  }
}
