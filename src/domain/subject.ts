/**
 * Who the rate limiter counts: an API key, or a client address (an IPv6 client's /64). A typed value made
 * here and only here, with the one name its state is kept under (in process, in Redis, in the data file's
 * saved buckets, in a takeover's handover), so no caller builds or strips a prefix.
 */
export type Subject = KeySubject | AddressSubject

export interface KeySubject {
  readonly kind: 'key'
  readonly id: string
  /** The name its state is kept under. */
  readonly name: string
}

export interface AddressSubject {
  readonly kind: 'address'
  /** Canonical (http/client-address.ts): an IPv4 address, or an IPv6 /64 written `PREFIX::/64`. */
  readonly address: string
  readonly name: string
}

/**
 * The client when none can be named: a socket without a peer address, or a trusted proxy's
 * X-Forwarded-For entry that is no address. Limited as one, trusted with nothing.
 */
export const UNKNOWN_CLIENT = 'unknown'

const KEY = 'key:'
const ADDRESS = 'ip:'

export function keySubject(id: string): KeySubject {
  return { kind: 'key', id, name: KEY + id }
}

export function addressSubject(address: string): AddressSubject {
  return { kind: 'address', address, name: ADDRESS + address }
}

/** The subject a kept name stands for (a handed-over ban), or null when it names none. */
export function subjectNamed(name: string): Subject | null {
  if (name.startsWith(KEY)) return keySubject(name.slice(KEY.length))
  if (name.startsWith(ADDRESS)) return addressSubject(name.slice(ADDRESS.length))
  return null
}
