/** Runs the shared repositories' work (storage/shared/sql.ts) on the data file, answering at once. */
import type { Database, SQLQueryBindings } from 'bun:sqlite'
import type { Runner, Step, Work } from '../shared/sql'
import { reading, writing } from './failures'

export class SqliteRunner implements Runner<'sync'> {
  constructor(private readonly db: Database) {}

  read<T>(work: () => Work<T>): T {
    const steps = work()
    return reading(() => this.finish(steps, steps.next()))
  }

  /** In one immediate transaction: it holds the file's write lock, so no other lock is taken. */
  write<T>(work: () => Work<T>): T {
    const steps = work()
    const first = steps.next()
    if (first.done) return first.value
    return writing(this.db, () => this.finish(steps, first))
  }

  private finish<T>(steps: Work<T>, next: IteratorResult<Step, T>): T {
    while (!next.done) next = steps.next(this.perform(next.value))
    return next.value
  }

  private perform(step: Step): unknown {
    if ('lock' in step) return undefined
    const statement = 'rows' in step ? step.rows : step.changes
    const query = this.db.query(statement.text('sqlite'))
    const values = statement.values as SQLQueryBindings[]
    if (!('rows' in step)) return query.run(...values).changes
    // A statement is always read the same way where it is written, so the cached one keeps its setting.
    if (step.exact) query.safeIntegers(true)
    return query.all(...values)
  }
}
