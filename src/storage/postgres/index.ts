/**
 * PostgreSQL storage through Bun.sql, for several instances sharing one database. Opening applies the
 * embedded migrations in one transaction under an advisory lock, so instances that start together
 * migrate once, and refuses a schema newer than this binary. Every member answers with a promise.
 */
import type { SQL } from 'bun'
import { redactedUrl } from '../../domain/redacted-url'
import { type Storage, StorageOpenError } from '../../domain/repositories'
import { SqlKeys } from '../shared/keys'
import { SeenInOrder } from '../shared/limit-resets'
import { SqlLimiterState } from '../shared/limiter-state'
import { olderSchemaRefused, openFailure } from '../shared/open-errors'
import { SqlOperators } from '../shared/operators'
import { SqlPets } from '../shared/pets'
import { SqlUsage } from '../shared/usage'
import { guarded, isUnavailable } from './failures'
import { LOCKS, MIGRATIONS } from './migrations'
import { POSTGRES_INSERTS } from './pets'
import { type Database, type Deadlines, openDatabase, SERVING } from './pool'
import { PostgresRunner } from './runner'

// The engine's door: nothing outside storage/ imports the files behind it.
export { COMMAND } from './pool'

export interface PostgresOptions {
  /** Connections in this instance's pool (Bun.sql opens them all at the first query). */
  pool: number
  /** How long a query and a transaction may take on our side (a server's by default). */
  deadlines?: Deadlines
  /** A database at an older schema is upgraded (the server, commands that write) or refused (commands that only read). */
  olderSchema?: 'upgrade' | 'refuse'
}

/**
 * What opening waits for the database, as a command does: instances that start together wait for the
 * one that migrates (a migration may take a while), and a start beside a database slow to answer (its
 * own restart, a loaded host) waits for it instead of failing at the first query's second.
 */
const START_MS = 60_000

export async function openPostgresStorage(url: string, options: PostgresOptions): Promise<PostgresStorage> {
  const location = redactedUrl(url)
  const deadlines = options.deadlines ?? SERVING
  const sql = openDatabase(
    url,
    {
      max: options.pool,
      connection: {
        // A 201 only after its commit is flushed, whatever the server's default: pinned per connection.
        synchronous_commit: 'on',
        // The server's own limits, for a server that answers (pool.ts bounds the wait for one that does
        // not): a lock held by a stalled instance or a long `pets seed` is given up on before our
        // transaction deadline, so the connection stays usable; a query that does not finish, or a
        // transaction left open by an instance that froze, ends in an error (a 503).
        lock_timeout: `${deadlines.transactionMs / 2}ms`,
        statement_timeout: '10s',
        idle_in_transaction_session_timeout: '10s',
        application_name: 'petstore',
      },
      connectionTimeout: 5,
    },
    deadlines,
  )
  try {
    await sql.begin(async (tx) => {
      // The serving lock_timeout and statement_timeout would end a wait for another instance's migration.
      await tx`SELECT set_config('lock_timeout', ${`${START_MS}ms`}, true), set_config('statement_timeout', ${`${START_MS}ms`}, true)`
      await checkEncoding(tx, location)
      if (options.olderSchema === 'refuse') await checkCurrent(tx, location)
      else await migrate(tx, location)
    }, START_MS)
  } catch (error) {
    await sql.close()
    throw openFailure(error, `cannot ${isUnavailable(error) ? 'reach' : 'use'} PostgreSQL at ${location}`)
  }
  return new PostgresStorage(sql, location)
}

/**
 * Names may hold any Unicode character, and a database in another encoding refuses (or, as SQL_ASCII,
 * stores unchecked and sorts as bytes) the ones it cannot hold; then one name would fail its whole
 * batch. Only UTF8 can hold every name, so any other encoding is refused before anything is written.
 */
async function checkEncoding(tx: SQL, location: string): Promise<void> {
  const [row] = (await tx`SELECT current_setting('server_encoding') AS encoding`) as { encoding: string }[]
  if (row!.encoding !== 'UTF8')
    throw new StorageOpenError(
      `the database at ${location} uses the ${row!.encoding} encoding, which cannot hold every pet name; ` +
        `petstore needs a UTF8 database (createdb -E UTF8 -T template0 NAME)`,
    )
}

/** Reads the schema version without creating or changing anything. */
async function checkCurrent(tx: SQL, location: string): Promise<void> {
  const [row] = (await tx`SELECT to_regclass('petstore_schema') IS NOT NULL AS present`) as { present: boolean }[]
  const version = row!.present ? await versionOf(tx) : 0
  refuseNewer(version, location)
  if (version < MIGRATIONS.length) throw olderSchemaRefused(`the database at ${location}`, version, MIGRATIONS.length)
}

async function versionOf(tx: SQL): Promise<number> {
  const [row] = (await tx`SELECT coalesce(max(version), 0) AS version FROM petstore_schema`) as { version: number }[]
  return Number(row!.version)
}

function refuseNewer(version: number, location: string): void {
  if (version > MIGRATIONS.length)
    throw new StorageOpenError(
      `the database at ${location} was written by a newer petstore (schema ${version}, this one knows up to ${MIGRATIONS.length}); ` +
        'run that newer petstore, or go back to this version by restoring the dump taken before the upgrade ' +
        '(pg_restore, every instance stopped; see docs/upgrading.md)',
    )
}

/** Under an advisory lock, so that instances starting together migrate once. */
async function migrate(tx: SQL, location: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(${LOCKS.schema})`
  await tx`CREATE TABLE IF NOT EXISTS petstore_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`
  const version = await versionOf(tx)
  refuseNewer(version, location)
  for (let next = version; next < MIGRATIONS.length; next++) {
    await tx.unsafe(MIGRATIONS[next]!)
    await tx`INSERT INTO petstore_schema (version) VALUES (${next + 1})`
  }
}

export class PostgresStorage implements Storage {
  readonly writable = true
  /** Other instances create pets too. */
  readonly soleWriter = false
  readonly answersAtOnce = false
  readonly pets: SqlPets<'async'>
  readonly keys: SqlKeys<'async'>
  readonly limiterState: SqlLimiterState<'async'>
  readonly usage: SqlUsage<'async'>
  readonly operators: SqlOperators<'async'>

  constructor(
    private readonly sql: Database,
    readonly location: string,
  ) {
    const runner = new PostgresRunner(sql)
    this.pets = new SqlPets(runner, POSTGRES_INSERTS)
    this.keys = new SqlKeys(runner, new SeenInOrder(runner))
    this.limiterState = new SqlLimiterState(runner)
    this.usage = new SqlUsage(runner)
    this.operators = new SqlOperators(runner)
  }

  ping(): Promise<void> {
    return guarded(async () => {
      await this.sql`SELECT 1`
    })
  }

  close(): Promise<void> {
    return this.sql.close()
  }
}
