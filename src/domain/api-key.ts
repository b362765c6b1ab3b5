/**
 * What an API key is: 256 random bits shown once, of which only the SHA-256 hash is kept, with a plan and
 * its limits. A random secret needs no slow hash (which would cost milliseconds a request), and a look-up
 * by the whole secret's hash takes no longer for a closer guess.
 * A secret is `psk_`, 43 base62 characters (256 bits) and 6 base62 characters of their CRC32, as GitHub's
 * tokens carry one: a scanner finds a leaked one, and a server refuses a mistyped or made-up one without
 * reading storage. Secrets made before the checksum (`psk_` and 43 base64url characters) stay valid.
 */
import { type CreateKeyInput, checkKeyName, limitsFor } from './key-input'
import type { Limits, Plan } from './plans'
import type { KeySubject } from './subject'

export interface ApiKeyRecord {
  id: string
  name: string
  plan: Plan
  rpm: number
  rpd: number
  secretHash: string
  createdAt: number
  lastUsedAt: number | null
  revokedAt: number | null
}

/** What a server needs of a key to accept it: a change reads no more (a start reads every key). */
export type KeyChange = Pick<ApiKeyRecord, 'id' | 'plan' | 'rpm' | 'rpd' | 'secretHash' | 'revokedAt'>

const SECRET_PREFIX = 'psk_'

/** A key as a running server holds it: what the gate, the limiter and the handlers need of it. */
export interface ActiveKey {
  id: string
  plan: Plan
  limits: Limits
  /** The limiter's subject for this key. */
  subject: KeySubject
}

/** The key registry's look-ups, as the gate makes them (the registry is modules/keys/service.ts). */
export interface KeyLookup {
  /** The key of a secret, from memory. */
  find(secret: string): ActiveKey | undefined
  /**
   * For a secret `find` missed: looks again after reading storage's changes; undefined when known to be
   * no key; rejects with StorageUnavailableError when storage cannot be read.
   */
  findLate(secret: string): Promise<ActiveKey | undefined> | undefined
  markUsed(key: ActiveKey, now: number): void
}

export function hashSecret(secret: string): string {
  return Bun.CryptoHasher.hash('sha256', secret, 'hex')
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
const RANDOM_CHARS = 43
const CHECK_CHARS = 6
/** A secret with its checksum; and one made before it, which only storage can tell from a made-up one. */
const CHECKED_SECRET = /^psk_[0-9A-Za-z]{49}$/
const UNCHECKED_SECRET = /^psk_[A-Za-z0-9_-]{43}$/

/** CRC32 of the random part, as 6 base62 digits (62^6 > 2^32), most significant first. */
function checksumOf(random: string): string {
  let value = Bun.hash.crc32(random)
  let digits = ''
  for (let i = 0; i < CHECK_CHARS; i++) {
    digits = BASE62[value % 62]! + digits
    value = Math.floor(value / 62)
  }
  return digits
}

/** 43 base62 characters, each from a random byte below 248 (4 × 62), so all are equally likely. */
function randomBase62(length: number): string {
  let out = ''
  while (out.length < length)
    for (const byte of crypto.getRandomValues(new Uint8Array(length))) if (byte < 248 && out.length < length) out += BASE62[byte % 62]
  return out
}

/** Whether a token may be a key's secret: shaped like one, and its checksum right when it carries one. */
export function mayBeSecret(token: string): boolean {
  if (token.length === SECRET_PREFIX.length + RANDOM_CHARS + CHECK_CHARS && CHECKED_SECRET.test(token))
    return checksumOf(token.slice(SECRET_PREFIX.length, -CHECK_CHARS)) === token.slice(-CHECK_CHARS)
  return UNCHECKED_SECRET.test(token)
}

export function randomToken(bytes: number): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString('base64url')
}

/** True for text shaped like a secret (what `keys create` prints), which must never be echoed back. */
export function looksLikeSecret(text: string): boolean {
  return text.startsWith(SECRET_PREFIX)
}

/** What a key's id looks like (makeKey's: `key_` and base64url): anything else names no key. */
export const KEY_ID = /^key_[A-Za-z0-9_-]{1,64}$/

/** A new key's one-time secret and the record to store (only the secret's hash is kept). */
export function makeKey(input: CreateKeyInput, now: number): { secret: string; record: ApiKeyRecord } {
  const limits = limitsFor(input)
  const name = checkKeyName(input.name)
  const random = randomBase62(RANDOM_CHARS)
  const secret = SECRET_PREFIX + random + checksumOf(random)
  const record: ApiKeyRecord = {
    id: `key_${randomToken(9)}`,
    name,
    plan: input.plan as Plan,
    rpm: limits.rpm,
    rpd: limits.rpd,
    secretHash: hashSecret(secret),
    createdAt: now,
    lastUsedAt: null,
    revokedAt: null,
  }
  return { secret, record }
}
