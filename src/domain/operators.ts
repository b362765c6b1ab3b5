/**
 * Operators: the people who sign in to the console. A password is generated (never chosen) and kept as an
 * argon2id hash; a session or token is a random secret of which only the SHA-256 hash is kept, as for API
 * keys. What they do is kept in the audit log.
 */
import { hashSecret, randomToken } from './api-key'
import { OPERATOR_NAME, OPERATOR_NAME_RULE } from './operator-name'
import { DAY_MS, MINUTE_MS } from './time'

export interface OperatorRecord {
  name: string
  createdAt: number
}

/** A browser's sign-in (ends when idle) or a script's token (ends when replaced). */
export type CredentialKind = 'session' | 'token'

export interface Credential {
  operator: string
  kind: CredentialKind
  lastSeenAt: number
}

export interface AuditEntry {
  at: number
  /** The operator who acted, or the command line (commandLineActor). */
  actor: string
  /** What was done, e.g. `key.revoke`. */
  action: string
  /** What it was done to (a key id, an address, an operator), or '' when nothing. */
  target: string
}

/**
 * The actor of what the command line does (`keys`, `operators`, and the first start's key and operator):
 * `cli (USER)`, the account that ran it, which no operator's name can be (no spaces or brackets there).
 */
export function commandLineActor(user: string, firstStart = false): string {
  return `cli (${user}${firstStart ? ', first start' : ''})`
}
/** The actor of the one audit entry a UTC day that counts refused sign-ins for names that are no operator. */
export const UNKNOWN_NAMES_ACTOR = '(unknown names)'
export const SIGN_IN_REFUSED = 'operator.sign-in-refused'

/** A browser session ends after this long without a request. */
export const SESSION_IDLE_MS = 30 * MINUTE_MS
/** A session's last use is written at most this often: the idle end may come this much early. */
export const LAST_SEEN_WRITE_MS = 5_000
/**
 * Failed sign-ins for one name from one client address within THROTTLE_WINDOW_MS, after which that name is
 * refused to that address: a guesser at one address cannot lock the operator out everywhere.
 */
export const THROTTLE_FAILURES = 5
/** Failed sign-ins for one name from every address together, after which it is refused to all: a guesser with many addresses gets no more. */
export const THROTTLE_NAME_FAILURES = 50
export const THROTTLE_WINDOW_MS = 15 * MINUTE_MS
/** How long the audit log keeps refused sign-ins (other entries are kept). */
export const REFUSED_SIGN_IN_RETENTION_MS = 30 * DAY_MS

export class OperatorInputError extends Error {}

export function checkOperatorName(name: string): string {
  if (!OPERATOR_NAME.test(name)) throw new OperatorInputError(OPERATOR_NAME_RULE)
  return name
}

/** A new password: 128 random bits, readable and typeable. */
export function generatePassword(): string {
  return randomToken(16)
}

/**
 * A store's password hashes share one setting, its oldest operator's, and an unknown name is checked
 * against a decoy made with it, so a check takes as long whichever operator it meets, and whether or not
 * the name exists. A store's first operator gets OWASP's first argon2id setting (19 MiB, 2 passes)
 * rather than Bun's default (64 MiB, which stores made before keep): the passwords are 128 random bits,
 * which no memory cost needs to protect, while each hash or check holds its memory in the server (the
 * first start, every sign-in, a stranger's included).
 */
const FIRST_SETTING = { memoryCost: 19_456, timeCost: 2 }
const ARGON2ID_SETTING = /^\$argon2id\$v=\d+\$m=(\d+),t=(\d+),p=1\$/

type Setting = { algorithm: 'argon2id'; memoryCost: number; timeCost: number }

/** The setting of the store whose oldest operator's hash is `oldest` (null: a store with none). */
function settingOf(oldest: string | null): Setting {
  const found = oldest === null ? null : ARGON2ID_SETTING.exec(oldest)
  return { algorithm: 'argon2id', ...(found ? { memoryCost: Number(found[1]), timeCost: Number(found[2]) } : FIRST_SETTING) }
}

/** A password's hash, with the setting of the store whose oldest operator's hash is `oldest`. */
export function hashPassword(password: string, oldest: string | null): Promise<string> {
  return Bun.password.hash(password, settingOf(oldest))
}

/**
 * Checks a password against a stored hash; with no hash (no such operator) the store's decoy is checked,
 * so the answer takes as long whether or not the name exists.
 */
export async function passwordMatches(password: string, hash: string | null, oldest: string | null): Promise<boolean> {
  const matches = await Bun.password.verify(password, hash ?? (await decoyHash(oldest)))
  return hash !== null && matches
}

/** One per setting met (a store has one), made once. */
const decoys = new Map<string, Promise<string>>()

/** The hash an unknown name is checked against: a random password's, with the store's setting. */
export function decoyHash(oldest: string | null): Promise<string> {
  const setting = settingOf(oldest)
  const id = `${setting.memoryCost},${setting.timeCost}`
  if (!decoys.has(id)) decoys.set(id, Bun.password.hash(generatePassword(), setting))
  return decoys.get(id)!
}

/** A new session or token secret, with the hash that is stored. */
export function makeCredentialSecret(kind: CredentialKind): { secret: string; hash: string } {
  const secret = `${kind === 'token' ? 'pso_' : ''}${randomToken(32)}`
  return { secret, hash: hashSecret(secret) }
}
