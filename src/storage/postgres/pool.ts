/**
 * Bun.sql's pool with a deadline on our side for every query and transaction: PostgreSQL's own timeouts
 * never fire in a server that stops answering without closing its connections (a stalled host, a
 * black-holed network). Bun cannot take one connection out of its pool, so a missed deadline closes the
 * whole pool and a new one takes its place; a transaction cut off that way may still commit, which the
 * client's retry with its Idempotency-Key settles.
 */
import { SQL } from 'bun'
import { StorageUnavailableError } from '../../domain/repositories'

export interface Deadlines {
  /** One statement outside a transaction: reads, the change poll, the readiness ping. */
  queryMs: number
  /** One transaction, from asking for a connection to its commit: a batch of creates, a key change. */
  transactionMs: number
}

/**
 * A server's deadlines: a read answers well within its 5 s, and a create, which may wait for the batch
 * ahead of it before its own, answers within 2 × 2 s.
 */
export const SERVING: Deadlines = { queryMs: 1_000, transactionMs: 2_000 }

/** The CLI's: sample data of 100,000 pets or a reset of every pet is one transaction. */
export const COMMAND: Deadlines = { queryMs: 60_000, transactionMs: 60_000 }

type Transaction<T> = (tx: SQL) => Promise<T>

/** Called as a tagged template like Bun's `sql`, with `begin` for transactions. */
export interface Database {
  // Rows are typed by the caller, as with Bun's own `sql`.
  // biome-ignore lint/suspicious/noExplicitAny: as Bun's own `sql` answers
  (strings: TemplateStringsArray, ...values: unknown[]): Promise<any>
  /** Runs `body` in one transaction within `ms` (the transaction deadline by default). */
  begin<T>(body: Transaction<T>, ms?: number): Promise<T>
  /** A statement whose text we built (never from input), with $n parameters. */
  // biome-ignore lint/suspicious/noExplicitAny: as Bun's own `sql` answers
  unsafe(query: string, parameters: unknown[]): Promise<any>
  close(): Promise<void>
}

export function openDatabase(url: string, options: Omit<SQL.PostgresOrMySQLOptions, 'url'>, deadlines: Deadlines): Database {
  let pool = new SQL(url, options)

  /** Runs `work` on the current pool; past `ms`, rejects and replaces the pool (once, if still current). */
  async function within<T>(ms: number, work: (sql: SQL) => Promise<T>): Promise<T> {
    const used = pool
    let timer: ReturnType<typeof setTimeout> | undefined
    const missed = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        // Said first: closing the pool fails the query at once, and its "Connection closed" would win the race.
        reject(new StorageUnavailableError('timeout', `the database did not answer within ${ms} ms`, true))
        if (pool === used) {
          pool = new SQL(url, options)
          void used.close({ timeout: 0 }).catch(() => {})
        }
      }, ms)
    })
    try {
      return await Promise.race([work(used), missed])
    } finally {
      clearTimeout(timer)
    }
  }

  const database = ((strings: TemplateStringsArray, ...values: unknown[]) =>
    within(deadlines.queryMs, (sql) => sql(strings, ...values))) as Database
  database.begin = <T>(body: Transaction<T>, ms = deadlines.transactionMs) => within(ms, (sql) => sql.begin((tx) => body(tx)) as Promise<T>)
  database.unsafe = (query: string, parameters: unknown[]) => within(deadlines.queryMs, (sql) => sql.unsafe(query, parameters))
  // Every query has ended or been given up on by now: the wait is a bound, not a need.
  database.close = () => pool.close({ timeout: 1 })
  return database
}
