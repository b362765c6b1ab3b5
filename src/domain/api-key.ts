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
  /** The hash of the key's secret (of the newest, once rolled). */
  secretHash: string
  createdAt: number
  /** The key's last use, by any of its secrets. */
  lastUsedAt: number | null
  /** The last use of its newest secret. */
  secretLastUsedAt: number | null
  revokedAt: number | null
  /** From this time on (ms) the key is refused as expired; null: never. */
  expiresAt: number | null
  /** Which form the secret has: with a checksum, or made before secrets carried one. */
  secretFormat: SecretFormat
  /** The time of the key's last roll; null when never rolled. */
  rolledAt: number | null
  /** The secret the last roll replaced, which works until previousEndsAt; null when none is kept. */
  previousSecretHash: string | null
  previousEndsAt: number | null
  previousLastUsedAt: number | null
}

export type SecretFormat = 'checked' | 'legacy'

/** What a server needs of a key to accept it: a change reads no more (a start reads every key). */
export type KeyChange = Pick<
  ApiKeyRecord,
  'id' | 'plan' | 'rpm' | 'rpd' | 'secretHash' | 'revokedAt' | 'expiresAt' | 'rolledAt' | 'previousSecretHash' | 'previousEndsAt'
>

const SECRET_PREFIX = 'psk_'

/** A key as a running server holds it, by one of its secrets: what the gate, the limiter and the handlers need of it. */
export interface ActiveKey {
  id: string
  plan: Plan
  limits: Limits
  /** The limiter's subject for this key. */
  subject: KeySubject
  /** The hash of the secret it was found by: its last use is kept apart from the other secret's. */
  secretHash: string
  /** From this time on (ms) this secret is refused as expired (Infinity: never). */
  endsAt: number
  /** For the secret a roll replaced, the time of that roll; else null. */
  replacedAt: number | null
}

/** One working secret of a key (the newest, or the one its last roll replaced while it is kept), and its last use. */
export interface SecretUse {
  secret: 'newest' | 'previous'
  lastUsedAt: number | null
  /** When it stops working (ms); null: never. */
  endsAt: number | null
}

/** The secrets of a key an operator looks at before a roll's overlap ends: is the previous one still used? */
export function secretUses(record: ApiKeyRecord): SecretUse[] {
  return secretsOf(record).map(({ endsAt }, i) => ({
    secret: i === 0 ? 'newest' : 'previous',
    lastUsedAt: i === 0 ? record.secretLastUsedAt : record.previousLastUsedAt,
    endsAt: Number.isFinite(endsAt) ? endsAt : null,
  }))
}

/** Why a secret past its end is refused (the 401 `key_expired` says it). */
export function expiryMessage(key: Pick<ActiveKey, 'endsAt' | 'replacedAt'>): string {
  const ended = new Date(key.endsAt).toISOString()
  return key.replacedAt === null
    ? `This API key expired at ${ended}.`
    : `This secret was replaced by a newer one at ${new Date(key.replacedAt).toISOString()} and stopped working at ${ended}; use the newer secret.`
}

/** The secrets of a key that a server accepts, each with its end: the newest, and the one a roll replaced while it works. */
export function secretsOf(change: KeyChange): Omit<ActiveKey, 'id' | 'plan' | 'limits' | 'subject'>[] {
  const keyEnds = change.expiresAt ?? Infinity
  const secrets = [{ secretHash: change.secretHash, endsAt: keyEnds, replacedAt: null as number | null }]
  if (change.previousSecretHash !== null)
    secrets.push({
      secretHash: change.previousSecretHash,
      endsAt: Math.min(keyEnds, change.previousEndsAt ?? -Infinity),
      replacedAt: change.rolledAt,
    })
  return secrets
}

/** The key registry's look-ups, as the gate makes them (the registry is modules/keys/service.ts). */
export interface KeyLookup {
  /** The key of a secret, from memory. */
  find(secret: string): ActiveKey | undefined
  /**
   * For a secret `find` missed: looks again after reading storage's changes; undefined for no key. At
   * once when storage answers at once (the data file), else a promise; throws, or rejects, with
   * StorageUnavailableError when storage cannot be read.
   */
  findLate(secret: string): ActiveKey | undefined | Promise<ActiveKey | undefined>
  /** True when findLate never gives a promise (storage answers at once). */
  readonly answersAtOnce: boolean
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

/** A new secret, shown once, with its hash (all that is kept). */
export function makeSecret(): { secret: string; hash: string } {
  const random = randomBase62(RANDOM_CHARS)
  const secret = SECRET_PREFIX + random + checksumOf(random)
  return { secret, hash: hashSecret(secret) }
}

/** A new key's one-time secret and the record to store (only the secret's hash is kept). */
export function makeKey(input: CreateKeyInput, now: number, expiresAt: number | null = null): { secret: string; record: ApiKeyRecord } {
  const limits = limitsFor(input)
  const name = checkKeyName(input.name)
  const { secret, hash } = makeSecret()
  const record: ApiKeyRecord = {
    id: `key_${randomToken(9)}`,
    name,
    plan: input.plan as Plan,
    rpm: limits.rpm,
    rpd: limits.rpd,
    secretHash: hash,
    createdAt: now,
    lastUsedAt: null,
    secretLastUsedAt: null,
    revokedAt: null,
    expiresAt,
    secretFormat: 'checked',
    rolledAt: null,
    previousSecretHash: null,
    previousEndsAt: null,
    previousLastUsedAt: null,
  }
  return { secret, record }
}
