/**
 * The API's last few thousand answers, in memory for the console: no bodies, no headers, nothing secret.
 * One slot per answer in a ring, filled by plugins/answer-records.ts with the API's answers only (a load
 * balancer's probes of /healthz would push them out). A path is kept to RECENT_PATH_CHARS,
 * copied, so the ring holds no request's URL alive (5,000 paths of 16 KB would hold 80 MB).
 */

/** The characters of a path the ring keeps. */
export const RECENT_PATH_CHARS = 512

/**
 * A copy of `text` that shares no storage with the string it was sliced from. Measured in Bun 1.4: a
 * slice, a template, `(' ' + s).slice(1)` and concatenations all still hold the original; a round trip
 * through UTF-8 bytes does not (a lone surrogate becomes U+FFFD, which a path shown to an operator can bear).
 */
export function detached(text: string): string {
  return Buffer.from(text).toString()
}

export interface RecentRequest {
  /** Unix ms. */
  time: number
  method: string
  path: string
  status: number
  /** The key's id, when the request carried a valid key. */
  keyId: string | null
  /** The client's address, when it did not. */
  client: string | null
  durationMs: number
  requestId: string
}

export interface RecentFilter {
  keyId?: string
  status?: number
  limit: number
}

export class RecentRequests {
  private readonly ring: (RecentRequest | undefined)[]
  private next = 0

  constructor(readonly capacity = 5_000) {
    this.ring = new Array(capacity)
  }

  add(request: RecentRequest): void {
    if (request.path.length > RECENT_PATH_CHARS) request.path = detached(request.path.slice(0, RECENT_PATH_CHARS))
    this.ring[this.next] = request
    this.next = (this.next + 1) % this.capacity
  }

  /** Newest first, at most `limit`, those matching the filter. */
  list(filter: RecentFilter): RecentRequest[] {
    const found: RecentRequest[] = []
    for (let i = 1; i <= this.capacity && found.length < filter.limit; i++) {
      const entry = this.ring[(this.next - i + this.capacity) % this.capacity]
      if (!entry) break
      if (filter.keyId !== undefined && entry.keyId !== filter.keyId) continue
      if (filter.status !== undefined && entry.status !== filter.status) continue
      found.push(entry)
    }
    return found
  }
}
