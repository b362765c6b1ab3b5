/**
 * PostgreSQL's failures, told apart: the database cannot take writes or does not answer now (503, and
 * the server recovers by itself when it does), and bugs (500).
 */
import { StorageUnavailableError } from '../../domain/repositories'

/**
 * The rule: a failure is "not now" when it speaks of the database (its connection, its resources, its
 * operator, its timers, other sessions' locks) and not of the statement we sent, which would then succeed
 * unchanged once the database is back. By SQLSTATE class (the first two characters):
 *   08 connection exception, 28 invalid authorization (a password changed under a running server),
 *   3D invalid catalog name (the database is gone), 40 transaction rollback (serialization failure,
 *   deadlock), 53 insufficient resources (disk full, out of memory, too many connections), 57 operator
 *   intervention (statement timeout, cancel, terminated, shutting down, starting up), 58 system error (I/O).
 * Two classes mix the database's state with a statement's mistakes; from them, the codes of the first
 * kind: 25006 read-only transaction (a standby, or the database set read-only), 25P03 idle-in-transaction
 * and 25P04 transaction timeout (the server ended a session it thought abandoned), 55006 object in use
 * and 55P03 lock not available (a lock held by someone else past lock_timeout).
 * Every other SQLSTATE (22 data, 23 constraint, 42 syntax or access, XX internal, ...) is a bug: 500.
 */
const UNAVAILABLE_STATES = /^(08|28|3D|40|53|57|58)...$|^(25006|25P03|25P04|55006|55P03)$/

/**
 * Bun's own codes for a connection that could not be made, was lost, or timed out (ERR_POSTGRES_
 * CONNECTION_CLOSED, _CONNECTION_TIMEOUT, _IDLE_TIMEOUT, _LIFETIME_TIMEOUT, TLS failures), and the
 * system's for a socket that failed. Its other codes (a query it cannot build, an unsafe transaction)
 * are bugs.
 */
const UNAVAILABLE_CODES =
  /^ERR_POSTGRES_(CONNECTION_\w+|\w+_TIMEOUT|TLS_\w+)$|^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTCONN|EHOSTUNREACH|ENETUNREACH)$/

/**
 * Of those, the failures after which the database still answers reads: read-only, disk full, a
 * transaction rolled back, a lock or session ended, a statement cancelled. The rest (its connection,
 * authorization, the database gone, shutting down or starting up, too many connections, out of memory,
 * I/O, Bun's connection and timeout codes) mean it does not answer at all.
 */
const WRITES_ONLY_STATES = /^40...$|^(25006|25P03|25P04|53100|55006|55P03|57014)$/

export function isUnavailable(error: unknown): boolean {
  const { errno, code } = (error ?? {}) as { errno?: unknown; code?: unknown }
  return (typeof errno === 'string' && UNAVAILABLE_STATES.test(errno)) || (typeof code === 'string' && UNAVAILABLE_CODES.test(code))
}

/** Runs a query; a failure that means "not now" becomes StorageUnavailableError. */
export async function guarded<T>(query: () => Promise<T>): Promise<T> {
  try {
    return await query()
  } catch (error) {
    if (error instanceof StorageUnavailableError) throw error
    if (isUnavailable(error)) {
      const { errno } = error as { errno?: unknown }
      const down = !(typeof errno === 'string' && WRITES_ONLY_STATES.test(errno))
      throw new StorageUnavailableError(describe(error), `the database cannot be used now (${describe(error)})`, down)
    }
    throw error
  }
}

function describe(error: unknown): string {
  const { errno, code } = (error ?? {}) as { errno?: unknown; code?: unknown }
  return String(typeof errno === 'string' && errno ? errno : (code ?? 'unknown'))
}
