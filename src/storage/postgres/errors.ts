/**
 * PostgreSQL's failures, told apart: the database cannot take writes or does not answer now (503, and
 * the server recovers by itself when it does), and bugs (500).
 */
import { StorageUnavailableError } from '../types'

/**
 * SQLSTATE classes and codes that mean "not now" rather than "bug": connection problems (08),
 * insufficient resources such as a full disk (53), operator intervention such as a restart or a
 * statement timeout (57), system errors (58), a read-only transaction (25006), a lock timeout (55P03)
 * and serialization or deadlock aborts (40).
 */
const UNAVAILABLE_STATES = /^(08|53|57|58|40)|^(25006|55P03)$/

/** Bun's own codes for a connection that failed, closed or timed out. */
const UNAVAILABLE_CODES = /^ERR_POSTGRES_(CONNECTION|IDLE_TIMEOUT|LIFETIME_TIMEOUT|CONNECTION_TIMEOUT|TLS)|^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTCONN)$/

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
    if (isUnavailable(error)) throw new StorageUnavailableError(describe(error), `the database cannot be used now (${describe(error)})`)
    throw error
  }
}

function describe(error: unknown): string {
  const { errno, code } = (error ?? {}) as { errno?: unknown; code?: unknown }
  return String(typeof errno === 'string' && errno ? errno : (code ?? 'unknown'))
}
