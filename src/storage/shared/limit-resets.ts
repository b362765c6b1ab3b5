/**
 * How running servers hear that `keys reset-limits` forgot a key's day bucket. The two engines keep this
 * differently because they are read differently: a data file has one server, which takes each reset
 * away; PostgreSQL has a fleet, so a reset stays, numbered, and each instance reads past the last it saw.
 */
import type { LimitReset } from '../../domain/repositories'
import { keySubject } from '../../domain/subject'
import { exactInteger } from './numbers'
import { changes, type Integer, lock, type Mode, rows, type Runner, sql, type Work, type Written } from './sql'

export interface LimitResets<M extends Mode> {
  /** Part of the transaction that resets a key's limits: tells the servers. */
  ask(keyId: string, now: number): Work<void>
  /** The resets asked for since this handle's last call. */
  take(): Written<M, LimitReset[]>
}

/** The data file's: the one server takes each reset away. */
export class TakenByTheServer<M extends 'sync' | 'serving'> implements LimitResets<M> {
  constructor(private readonly db: Runner<M>) {}

  *ask(keyId: string, now: number): Work<void> {
    yield* changes(sql`INSERT OR REPLACE INTO limit_resets (key_id, requested_at) VALUES (${keyId}, ${now})`)
  }

  take(): Written<M, LimitReset[]> {
    // Asked often and seldom with anything to take: read before taking the file's write lock.
    if (this.db.read(() => rows(sql`SELECT 1 FROM limit_resets LIMIT 1`)).length === 0) return []
    // Taken and cleared together, with any day bucket the server saved since the reset was asked for.
    return this.db.write(function* () {
      const ids = (yield* rows<{ key_id: string }>(sql`SELECT key_id FROM limit_resets`)).map((row) => row.key_id)
      for (const id of ids) {
        yield* changes(sql`DELETE FROM limiter_state WHERE subject = ${keySubject(id).name}`)
        yield* changes(sql`DELETE FROM limit_resets WHERE key_id = ${id}`)
      }
      return ids.map((keyId) => ({ keyId, seq: null }))
    })
  }
}

/** PostgreSQL's: each reset keeps a sequence number, so each instance sees it once. */
export class SeenInOrder implements LimitResets<'async'> {
  /** The newest reset this handle has reported; resets older than its opening are not reported. */
  private seen: number | null = null

  constructor(private readonly db: Runner<'async'>) {}

  *ask(keyId: string, now: number): Work<void> {
    yield* lock({ of: 'limit-resets' })
    yield* changes(sql`INSERT INTO limit_resets (key_id, requested_at, seq) VALUES (${keyId}, ${now}, nextval('limit_resets_seq'))
                       ON CONFLICT (key_id) DO UPDATE SET requested_at = EXCLUDED.requested_at, seq = EXCLUDED.seq`)
  }

  take(): Promise<LimitReset[]> {
    const seen = this.seen
    return this.db
      .read(() => rows<{ key_id: string; seq: Integer }>(sql`SELECT key_id, seq FROM limit_resets WHERE seq > ${seen ?? 0} ORDER BY seq`))
      .then((found) => {
        if (found.length > 0) this.seen = exactInteger(found[found.length - 1]!.seq)
        else this.seen ??= 0
        return seen === null ? [] : found.map((row) => ({ keyId: row.key_id, seq: exactInteger(row.seq) }))
      })
  }
}
