/**
 * Whether the server can be trusted to serve. Once the data file is gone from under the server or
 * found damaged, nothing it serves or takes can be trusted until a restart: the fault holds, readiness
 * and creates say so, and the log says it once.
 */
import type { RateLimiter } from '../limiter/limiter'
import type { DataFileWatch, Storage } from '../domain/repositories'
import { withDeadline } from '../domain/time'

export class StorageFault {
  private reason: string | null = null

  constructor(
    private readonly dataFile: DataFileWatch | undefined,
    private readonly warn: (message: string) => void,
  ) {}

  /** Records the first fault; the ones after it change nothing. */
  note(reason: string): void {
    if (this.reason) return
    this.reason = reason
    this.warn(`${reason}; /readyz and creates answer 503 until the server is restarted on a good data file`)
  }

  /** The fault, if there is one; a data file replaced since the last look is one. */
  current(): string | null {
    if (!this.reason && this.dataFile?.replaced()) this.note('the data file was deleted or replaced under the server')
    return this.reason
  }
}

/** How long /readyz waits for storage to answer. */
const READY_TIMEOUT_MS = 1_000

/**
 * /readyz's question: why the server is not ready, or null when it is. With the local fallback the
 * server serves while Redis is away; without it (`sharedLimiterRequired`), it cannot.
 */
export function readinessCheck(parts: {
  fault: StorageFault
  storage: Storage
  limiter: Pick<RateLimiter, 'ping'>
  sharedLimiterRequired: boolean
}): () => Promise<string | null> {
  const { fault, storage, limiter, sharedLimiterRequired } = parts
  return async function notReady() {
    const reason = fault.current()
    if (reason) return `Not ready: ${reason}.`
    try {
      await withDeadline(storage.ping(), READY_TIMEOUT_MS, () => {
        throw new Error(`no answer within ${READY_TIMEOUT_MS} ms`)
      })
    } catch {
      // Any client may ask /readyz: where the data lives (a path, a database host and user) stays in the log.
      return 'Storage does not answer.'
    }
    if (sharedLimiterRequired && !(await limiter.ping())) return 'The shared rate limiter (Redis) does not answer.'
    return null
  }
}
