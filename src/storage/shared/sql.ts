/**
 * SQL written once for both engines. A repository's work is a generator that yields its statements (and
 * the locks it needs) and gets their results back; each engine's Runner executes them: SQLite at once,
 * inside one immediate transaction for a write, PostgreSQL with promises inside `begin`. So the same
 * code answers synchronously on SQLite and with a promise on PostgreSQL, as the domain's seam says.
 *
 *   const [row] = yield* rows<{ hash: string }>(sql`SELECT password_hash AS hash FROM operators WHERE name = ${name}`)
 *
 * Values become parameters (`?` or `$n`); the few words the engines spell differently are Words, and the
 * locks they take differently are named Locks. What an engine does its own way with many rows at once (new
 * pets and Idempotency-Key claims) is its pets.ts (shared/pets.ts: PetInserts).
 */

/**
 * How a backend answers: at once (SQLite) or with a promise (PostgreSQL). A serving data file reads at
 * once, and writes at once unless another process holds the file's write lock: then the write answers
 * with a promise, so the server's event loop does not stop while it waits (sqlite/runner.ts).
 */
export interface Answers<T> {
  sync: T
  async: Promise<T>
  serving: T
}
interface WriteAnswers<T> extends Omit<Answers<T>, 'serving'> {
  serving: T | Promise<T>
}
export type Mode = keyof Answers<unknown>
export type Answer<M extends Mode, T> = Answers<T>[M]
/** What a write answers: as a read does, except on a serving data file (see Answers). */
export type Written<M extends Mode, T> = WriteAnswers<T>[M]

export type Engine = 'sqlite' | 'postgres'

/** Text put into a statement as it is (never a parameter), spelled per engine where they differ. */
export class Words {
  constructor(
    readonly sqlite: string,
    readonly postgres: string = sqlite,
  ) {}
}

/** Locks the row read, until the transaction ends (SQLite needs none: its writers take turns). */
export const FOR_UPDATE = new Words('', 'FOR UPDATE')
/** A row's physical address, for deleting one of several equal rows. */
export const ROW_ID = new Words('rowid', 'ctid')
/** The larger of two values (SQLite's max takes several arguments; PostgreSQL's is an aggregate). */
export const GREATEST = new Words('max', 'greatest')

export class Statement {
  constructor(
    /** The text, with the parameter placeholders of `engine`, numbered after `before` others. */
    readonly text: (engine: Engine, before?: number) => string,
    readonly values: unknown[],
  ) {}
}

/** A statement from a template: values become parameters, Words are written in, and a Statement is written in with its values. */
export function sql(strings: TemplateStringsArray, ...values: unknown[]): Statement {
  const parameters = values.flatMap((value) => (value instanceof Words ? [] : value instanceof Statement ? value.values : [value]))
  return new Statement((engine, before = 0) => {
    let n = before
    return strings.reduce((text, part, i) => {
      const value = values[i - 1]
      if (value instanceof Words) return text + value[engine] + part
      if (!(value instanceof Statement)) return text + placeholder(engine, ++n) + part
      const inner = value.text(engine, n)
      n += value.values.length
      return text + inner + part
    })
  }, parameters)
}

/** `head` (INSERT INTO table (columns)) with many rows of values, each in the columns' order, then `tail`. */
export function insertRows(head: string, rows: unknown[][], tail = ''): Statement {
  const width = rows[0]?.length ?? 0
  return new Statement((engine, before = 0) => {
    const row = (r: number) => `(${Array.from({ length: width }, (_, c) => placeholder(engine, before + r * width + c + 1)).join(', ')})`
    return `${head} VALUES ${rows.map((_, r) => row(r)).join(', ')} ${tail}`
  }, rows.flat())
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
  /**
   * Numbers that others read past, held from their taking until the commit so they become visible in
   * order (a sequence's values commit in any order): pet ids (a client paging past one would never see
   * it), key change numbers and limit reset numbers (instances poll past them).
   */
  | { of: 'pet-ids' | 'key-changes' | 'limit-resets' }

/** `exact`: every integer as stored, whatever its size (a bigint from SQLite; PostgreSQL's int8 are strings anyway). */
export type Step = { rows: Statement; exact?: boolean } | { changes: Statement } | { lock: Lock }

/** A repository's work: its steps, then its answer. */
export type Work<T> = Generator<Step, T, unknown>

/** The rows a statement reads (or returns). */
export function* rows<R>(statement: Statement): Work<R[]> {
  return (yield { rows: statement }) as R[]
}

/** The rows a statement reads, integers exact (see Step). */
export function* exactRows<R>(statement: Statement): Work<R[]> {
  return (yield { rows: statement, exact: true }) as R[]
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
  write<T>(work: () => Work<T>): Written<M, T>
}

/** A bigint as the engines send it: a number from SQLite, a string from PostgreSQL. */
export type Integer = number | string

/** A write's `answer`, with `failed` given its failure, whether it is thrown at once (SQLite) or rejected (PostgreSQL). */
export function failing<M extends Mode, T>(answer: () => Written<M, T>, failed: (error: unknown) => never): Written<M, T> {
  try {
    const answered = answer()
    return (answered instanceof Promise ? answered.catch(failed) : answered) as Written<M, T>
  } catch (error) {
    failed(error)
  }
}
