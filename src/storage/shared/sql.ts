/**
 * SQL written once for both engines. A repository's work is a generator that yields its statements (and
 * the locks it needs) and gets their results back; each engine's Runner executes them: SQLite at once,
 * inside one immediate transaction for a write, PostgreSQL with promises inside `begin`. So the same
 * code answers synchronously on SQLite and with a promise on PostgreSQL, as the domain's seam says.
 *
 *   const [row] = yield* rows<{ hash: string }>(sql`SELECT password_hash AS hash FROM operators WHERE name = ${name}`)
 *
 * Values become parameters (`?` or `$n`); the few words the engines spell differently are Words.
 */

/** How a backend answers: at once (SQLite) or with a promise (PostgreSQL). */
export interface Answers<T> {
  sync: T
  async: Promise<T>
}
export type Mode = keyof Answers<unknown>
export type Answer<M extends Mode, T> = Answers<T>[M]

export type Engine = 'sqlite' | 'postgres'

/** Text the engines spell differently, put into a statement as it is (never a parameter). */
export class Words {
  constructor(
    readonly sqlite: string,
    readonly postgres: string,
  ) {}
}

/** Locks the row read, until the transaction ends (SQLite needs none: its writers take turns). */
export const FOR_UPDATE = new Words('', 'FOR UPDATE')
/** A row's physical address, for deleting one of several equal rows. */
export const ROW_ID = new Words('rowid', 'ctid')

export interface Statement {
  /** The text, with the parameter placeholders of `engine`. */
  text(engine: Engine): string
  values: unknown[]
}

/** A statement from a template: values become parameters, Words are written in. */
export function sql(strings: TemplateStringsArray, ...values: unknown[]): Statement {
  const parameters = values.filter((value) => !(value instanceof Words))
  return {
    text(engine) {
      let n = 0
      return strings.reduce((text, part, i) => {
        const value = values[i - 1]
        return text + (value instanceof Words ? value[engine] : placeholder(engine, ++n)) + part
      })
    },
    values: parameters,
  }
}

/** A statement whose text is built by `build` from a placeholder function (n is 1-based). */
export function built(build: (param: (n: number) => string) => string, values: unknown[]): Statement {
  return { text: (engine) => build((n) => placeholder(engine, n)), values }
}

function placeholder(engine: Engine, n: number): string {
  return engine === 'sqlite' ? '?' : `$${n}`
}

/**
 * A lock held until the transaction ends, named for what it keeps apart. PostgreSQL takes an advisory
 * lock; SQLite takes none, since an immediate transaction already holds the file's one write lock.
 */
export type Lock =
  /** The start-up lock: instances that start together on an empty database make one first operator. */
  | { of: 'schema' }
  /** One name's sign-in count; null: the count of names that are no operator. */
  | { of: 'sign-in'; name: string | null }

export type Step = { rows: Statement } | { changes: Statement } | { lock: Lock }

/** A repository's work: its steps, then its answer. */
export type Work<T> = Generator<Step, T, unknown>

/** The rows a statement reads (or returns). */
export function* rows<R>(statement: Statement): Work<R[]> {
  return (yield { rows: statement }) as R[]
}

/** How many rows a statement changed. */
export function* changes(statement: Statement): Work<number> {
  return (yield { changes: statement }) as number
}

export function* lock(lock: Lock): Work<void> {
  yield { lock }
}

/** Runs work on one engine. The code before the work's first statement runs outside any transaction. */
export interface Runner<M extends Mode> {
  /** Each statement on its own: reads. */
  read<T>(work: () => Work<T>): Answer<M, T>
  /** Every statement in one transaction; a store that cannot take writes now answers StorageUnavailableError. */
  write<T>(work: () => Work<T>): Answer<M, T>
}

/** A bigint as the engines send it: a number from SQLite, a string from PostgreSQL. */
export type Integer = number | string
