/**
 * Runs the shared repositories' work (storage/shared/sql.ts) on PostgreSQL, with promises, and takes the
 * locks it names as transaction-level advisory locks.
 */
import type { SQL } from 'bun'
import type { Lock, Runner, Step, Work } from '../shared/sql'
import { guarded } from './failures'
import { LOCKS } from './migrations'
import type { Database } from './pool'

/** The first key of the two-key advisory locks that count sign-in attempts ('PETS'); the second is a name's hash. */
const SIGN_IN_LOCK = 0x50455453

export class PostgresRunner implements Runner<'async'> {
  constructor(private readonly sql: Database) {}

  read<T>(work: () => Work<T>): Promise<T> {
    return guarded(() => {
      const steps = work()
      return finish(steps, steps.next(), this.sql, null)
    })
  }

  write<T>(work: () => Work<T>): Promise<T> {
    return guarded(async () => {
      const steps = work()
      const first = steps.next()
      if (first.done) return first.value
      return this.sql.begin((tx) => finish(steps, first, tx, tx))
    })
  }
}

type Queries = Pick<Database, 'unsafe'>

async function finish<T>(steps: Work<T>, next: IteratorResult<Step, T>, queries: Queries, tx: SQL | null): Promise<T> {
  while (!next.done) next = steps.next(await perform(next.value, queries, tx))
  return next.value
}

async function perform(step: Step, queries: Queries, tx: SQL | null): Promise<unknown> {
  if ('lock' in step) {
    if (!tx) throw new Error('a lock is taken inside a transaction (write), not by a read')
    await take(tx, step.lock)
    return undefined
  }
  const statement = 'rows' in step ? step.rows : step.changes
  const result = await queries.unsafe(statement.text('postgres'), statement.values)
  return 'rows' in step ? result : (result as { count: number }).count
}

/** The advisory lock key of each lock that is one for the whole database. */
const ADVISORY = { schema: LOCKS.schema, 'pet-ids': LOCKS.petIds, 'key-changes': LOCKS.keyChanges, 'limit-resets': LOCKS.limitResets }

function take(tx: SQL, lock: Lock): Promise<unknown> {
  if (lock.of !== 'sign-in') return tx`SELECT pg_advisory_xact_lock(${ADVISORY[lock.of]})`
  if (lock.name === null) return tx`SELECT pg_advisory_xact_lock(${SIGN_IN_LOCK}::int, 0)`
  return tx`SELECT pg_advisory_xact_lock(${SIGN_IN_LOCK}::int, hashtext(${lock.name}))`
}
