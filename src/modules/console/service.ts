/**
 * What the console does, apart from HTTP: operators sign in (throttled per name) and hold a session or a
 * token; keys are listed with what the limiter holds of them, created, revoked, moved to another plan and
 * reset; bans are listed and lifted; the API's recent answers and the audit log are read. Every change
 * goes through storage (so every instance applies it at its change poll) and into the audit log.
 */
import { type ApiKeyRecord, hashSecret, type SecretUse, secretUses } from '../../domain/api-key'
import { isoTimeMs } from '../../domain/duration'
import { DEPRECATED_OPERATION, SUNSET } from '../../domain/deprecation'
import { type CreateKeyInput, DEFAULT_OVERLAP_MS, KeyInputError, type KeyRule } from '../../domain/key-input'
import {
  type Credential,
  type CredentialKind,
  LAST_SEEN_WRITE_MS,
  makeCredentialSecret,
  passwordMatches,
  SESSION_IDLE_MS,
  SIGN_IN_REFUSED,
  THROTTLE_FAILURES,
  THROTTLE_NAME_FAILURES,
  THROTTLE_WINDOW_MS,
} from '../../domain/operators'
import { type Limits, PLAN_LIMITS } from '../../domain/plans'
import type { Storage } from '../../domain/repositories'
import { type AddressSubject, keySubject, type Subject } from '../../domain/subject'
import { RESOLUTION_MS, utcDayStart } from '../../domain/usage'
import { DAY_MS, iso } from '../../domain/time'
import { ApiError, badRequest, notFound } from '../../http/api-errors'
import { createKey, type KeyRegistry, rollKey, setKeyPlan } from '../keys/service'
import { type KeyUsage, type UsageSeries, UsageService, type Window, WINDOWS } from '../usage/service'
import { FIELD_RULES, type Model } from './model'

/** What the limiter holds of a key or an address: its day quota left and the end of its ban. */
type Held = { dayLeft: number; bannedUntil: number | null }

/** What the console reads of the rate limiter (limiter/admin.ts's LimiterAdmin), declared here. */
export interface LimiterView {
  inspect(subject: Subject, limits: Limits): Promise<Held>
  bans(now: number): { subject: Subject; until: number }[]
  liftAddress(subject: AddressSubject): Promise<void>
}

export interface ConsoleServiceDeps {
  storage: Storage
  keys: KeyRegistry
  limiter: LimiterView
  now: () => number
}

/** The deprecated operation's sunset, from the same text the API's Sunset header sends. */
const SUNSET_MS = Date.parse(SUNSET)

const UNAUTHORIZED = new ApiError(
  401,
  'unauthorized',
  'Sign in first (POST /api/session), or send an operator token as Authorization: Bearer.',
)
const BAD_SIGN_IN = new ApiError(401, 'unauthorized', 'Wrong operator name or password.')

/** A key's rule broken, in the console's words: a 400 as the API's read, `FIELD: sentence`. */
export function keyRuleMessage({ field, rule, given }: KeyInputError): string {
  const sentences: Record<KeyRule, string> = {
    'unknown-plan': `${FIELD_RULES.plan}, not "${given.slice(0, 40)}"`,
    'limits-needed': 'an enterprise key needs rpm and rpd',
    'limits-only-enterprise': 'only an enterprise key has its own rpm and rpd',
    'limit-range': FIELD_RULES[field]!,
    name: FIELD_RULES.name!,
  }
  return `${field}: ${sentences[rule]}`
}

function keyInputError(error: unknown): never {
  if (!(error instanceof KeyInputError)) throw error
  throw badRequest(keyRuleMessage(error))
}

/** Secrets remembered as no credential at most; past it the memory starts afresh. */
const MAX_REMEMBERED_MISSES = 10_000

export class ConsoleService {
  private readonly usage: UsageService
  /** Credentials whose last use is being written now: one write at a time each. */
  private readonly touching = new Set<string>()
  /**
   * Hashes of secrets storage found to be no credential of their kind (made up, ended, idle too long), so
   * a client repeating one costs no read: a secret is made by the server once, so none becomes one later.
   * Holds at most MAX_REMEMBERED_MISSES, and is emptied when full.
   */
  private readonly misses = new Set<string>()
  /**
   * Hashes of secrets found live here: storage is still asked at each request (an ended session ends on
   * every instance), but a client address that has spent its keyless requests may ask only for these.
   * Holds at most MAX_REMEMBERED_MISSES, and is emptied when full.
   */
  private readonly live = new Set<string>()
  /** Reads of a credential under way: requests carrying the same secret at once share one. */
  private readonly reading = new Map<string, Promise<Credential | null>>()

  constructor(private readonly deps: ConsoleServiceDeps) {
    this.usage = new UsageService(deps.storage, deps.now)
  }

  /**
   * Signs an operator in: a new session's secret. Each attempt is reserved in storage before its password
   * is checked, so at most THROTTLE_FAILURES from one client address, and THROTTLE_NAME_FAILURES from all
   * together, are ever checked for a name within the window, however many arrive at once on however many
   * instances; after them the name is refused with 429 (to that address, or to all), whether or not it
   * exists. A session is stored only if the password it was checked against is still the operator's.
   */
  async signIn(name: string, password: string, address: string): Promise<{ secret: string; operator: string }> {
    const { storage, now } = this.deps
    const at = now()
    const throttle = { address, since: at - THROTTLE_WINDOW_MS, perAddress: THROTTLE_FAILURES, perName: THROTTLE_NAME_FAILURES }
    // A name already throttled is answered from a read: a flood of its sign-ins writes nothing.
    const blocking = (await storage.operators.signInBlocked(name, throttle)) ?? (await storage.operators.reserveSignIn(name, at, throttle))
    if (blocking !== null) {
      const retryAfter = Math.max(1, Math.ceil((blocking + THROTTLE_WINDOW_MS - at) / 1000))
      throw new ApiError(429, 'rate_limited', `Too many failed sign-ins for this name; try again in ${retryAfter} s.`, {
        'retry-after': String(retryAfter),
      })
    }
    // A failed attempt keeps its reservation: it is the failure the throttle counts.
    const { hash: checked, oldest } = await storage.operators.passwordHashes(name)
    if (!(await passwordMatches(password, checked, oldest))) {
      // An operator's name is throttled, so its refusals are few; other names are counted in one entry a day.
      if (checked === null) await storage.operators.countUnknownSignIn(now(), utcDayStart(now()))
      else await this.audit(name, SIGN_IN_REFUSED, name)
      throw BAD_SIGN_IN
    }
    const { secret, hash } = makeCredentialSecret('session')
    if (!(await storage.operators.addCredential(hash, name, 'session', now(), checked!))) throw BAD_SIGN_IN
    remember(this.live, `session ${hash}`)
    await storage.operators.releaseSignIn(name, at)
    await this.audit(name, 'operator.sign-in', name)
    return { secret, operator: name }
  }

  /**
   * The operator a session or token secret belongs to; 401 when it is unknown, ended or idle too long.
   * Its last use is written at most every LAST_SEEN_WRITE_MS, and not waited for.
   */
  async authenticate(secret: string | undefined, kind: CredentialKind): Promise<Credential> {
    if (!secret) throw UNAUTHORIZED
    const { storage, now } = this.deps
    const at = now()
    const hash = hashSecret(secret)
    if (this.misses.has(`${kind} ${hash}`)) throw UNAUTHORIZED
    const found = await this.read(hash)
    if (!found || found.kind !== kind) throw this.miss(kind, hash)
    if (kind === 'session' && found.lastSeenAt < at - SESSION_IDLE_MS) {
      await storage.operators.endCredential(hash)
      throw this.miss(kind, hash)
    }
    remember(this.live, `${kind} ${hash}`)
    if (found.lastSeenAt < at - LAST_SEEN_WRITE_MS && !this.touching.has(hash)) {
      this.touching.add(hash)
      queueMicrotask(async () => {
        try {
          await storage.operators.touchCredential(hash, at, at - LAST_SEEN_WRITE_MS)
        } catch {
          // Tried again at the session's next request; a session whose use is not written may end early.
        } finally {
          this.touching.delete(hash)
        }
      })
    }
    return found
  }

  private read(hash: string): Promise<Credential | null> {
    const under = this.reading.get(hash)
    if (under) return under
    const reading = Promise.resolve(this.deps.storage.operators.credential(hash)).finally(() => this.reading.delete(hash))
    this.reading.set(hash, reading)
    return reading
  }

  /** Whether the secret is remembered as no credential of that kind: asking storage again would be in vain. */
  knownMiss(secret: string, kind: CredentialKind): boolean {
    return this.misses.has(`${kind} ${hashSecret(secret)}`)
  }

  /** Whether the secret was found live here before (see `live`). */
  knownLive(secret: string, kind: CredentialKind): boolean {
    return this.live.has(`${kind} ${hashSecret(secret)}`)
  }

  private miss(kind: CredentialKind, hash: string): ApiError {
    this.live.delete(`${kind} ${hash}`)
    remember(this.misses, `${kind} ${hash}`)
    return UNAUTHORIZED
  }

  async signOut(operator: string, secret: string): Promise<void> {
    await this.deps.storage.operators.endCredential(hashSecret(secret))
    await this.audit(operator, 'operator.sign-out', operator)
  }

  /**
   * The keys (revoked ones too on request), with their day quota left and ban as the limiter holds them
   * (inspected, nothing taken), and their usage; with a page, only `limit` of them in id order after the key
   * `after`, and only theirs are asked of the limiter: a page costs the same however many keys there are.
   */
  async listKeys(withRevoked = false, page?: { limit: number; after?: string }): Promise<Model<'KeyList'>> {
    let next: string | null | undefined
    const pick = (records: ApiKeyRecord[]) => {
      const listed = records.filter((record) => withRevoked || record.revokedAt === null)
      if (!page) return listed
      const sorted = listed.filter((record) => page.after === undefined || record.id > page.after).sort((a, b) => (a.id < b.id ? -1 : 1))
      const shown = sorted.slice(0, page.limit)
      next = sorted.length > page.limit ? shown.at(-1)!.id : null
      return shown
    }
    const [{ keys, limiterAnswered }, usage] = await Promise.all([this.limiterRows(pick), this.usage.keys()])
    const byId = new Map(usage.map((figures) => [figures.keyId, figures]))
    const list = keys.map(({ record, held }) => keyRow(record, held, byId.get(record.id)))
    return next === undefined ? { keys: list, limiterAnswered } : { keys: list, limiterAnswered, next }
  }

  /** The fleet's requests over the last hour, day and week by outcome, active keys today and the current bans. */
  async overview(): Promise<Model<'Overview'>> {
    const [usage, { bans, limiterAnswered }] = await Promise.all([this.usage.overview(), this.bans()])
    return {
      activeKeysToday: usage.activeKeysToday,
      bansNow: bans.length,
      limiterAnswered,
      hour: columns(usage.hour),
      day: columns(usage.day),
      week: columns(usage.week),
    }
  }

  /** One key's figures and its series over a window; 404 when there is no such key. */
  async keyUsage(id: string, window: Window): Promise<Omit<Model<'KeyUsage'>, 'refusals'>> {
    const [figures, series] = await Promise.all([this.usage.key(id), this.usage.series(WINDOWS[window].ms, id)])
    if (!figures || figures.keyId === null) throw noKey(id)
    return {
      key: {
        id: figures.keyId,
        name: figures.name ?? '',
        // A key id in the figures means the key exists, and so does its plan.
        plan: figures.plan!,
        today: figures.today,
        lastUsedAt: iso(figures.lastUsed),
        expiresAt: iso(figures.secrets[0]?.endsAt ?? null),
        versions: figures.secrets.map(versionOf),
        deprecated: { day: figures.deprecated.day, week: figures.deprecated.week, last: iso(figures.deprecated.last) },
      },
      window,
      series: columns(series),
    }
  }

  /**
   * Who still calls the deprecated operation: every key with a call in the last 7 days, most calls first,
   * and the whole days left until its sunset (the API's Sunset header's date).
   */
  async deprecation(): Promise<Model<'Deprecation'>> {
    const now = this.deps.now()
    const callers = (await this.usage.keys())
      .filter((figures) => figures.keyId !== null && figures.deprecated.week > 0)
      .map((figures) => ({
        keyId: figures.keyId!,
        name: figures.name ?? '',
        day: figures.deprecated.day,
        week: figures.deprecated.week,
        lastCall: iso(figures.deprecated.last),
      }))
      .sort((a, b) => b.week - a.week || a.name.localeCompare(b.name))
    return {
      operation: DEPRECATED_OPERATION,
      method: 'GET',
      path: '/pets/{petId}',
      sunset: iso(SUNSET_MS)!,
      daysLeft: Math.max(0, Math.ceil((SUNSET_MS - now) / DAY_MS)),
      callers,
    }
  }

  /** The keys `pick` chooses (all by default), each with what the limiter holds of it. */
  private async limiterRows(
    pick: (records: ApiKeyRecord[]) => ApiKeyRecord[] = (records) => records,
  ): Promise<{ keys: { record: ApiKeyRecord; held: Held | null }[]; limiterAnswered: boolean }> {
    const records = pick(await this.deps.storage.keys.list())
    let limiterAnswered = true
    const inspect = (record: ApiKeyRecord) =>
      this.deps.limiter.inspect(keySubject(record.id), record).catch(() => {
        limiterAnswered = false
        return null
      })
    const keys = await Promise.all(
      records.map(async (record) => ({ record, held: record.revokedAt === null ? await inspect(record) : null })),
    )
    return { keys, limiterAnswered }
  }

  async createKey(operator: string, input: CreateKeyInput): Promise<Model<'CreatedKey'>> {
    const made = await createKey(this.deps.storage.keys, input, this.deps.now()).catch(keyInputError)
    // Known to this instance at once; other instances read it at their next poll.
    await this.deps.keys.reload()
    await this.audit(operator, 'key.create', made.record.id)
    return { key: keyRow(made.record, { dayLeft: made.record.rpd, bannedUntil: null }), secret: made.secret }
  }

  /** Idempotent; audited only by the request that revoked it (storage tells which). */
  async revokeKey(operator: string, id: string): Promise<void> {
    const done = await this.deps.storage.keys.revoke(id, this.deps.now())
    if (done === 'no-key') throw noKey(id)
    if (done === 'already-revoked') return
    await this.deps.keys.reload()
    await this.audit(operator, 'key.revoke', id)
  }

  /** Full buckets and no ban: applied by every instance at its next change poll (within a second). */
  async resetLimits(operator: string, id: string, action = 'key.reset-limits'): Promise<void> {
    if (!(await this.deps.storage.keys.resetLimits(id, this.deps.now()))) throw noKey(id, ' (or it is revoked)')
    await this.audit(operator, action, id)
  }

  async setPlan(operator: string, id: string, input: { plan: string; rpm?: number; rpd?: number }): Promise<void> {
    if (!(await setKeyPlan(this.deps.storage.keys, id, input).catch(keyInputError))) throw noKey(id, ' (or it is revoked)')
    await this.deps.keys.reload()
    await this.audit(operator, 'key.set-plan', `${id} ${input.plan}`)
  }

  /** A new secret for the key; the previous works `overlapSeconds` more (a day by default). Audited. */
  async rollKey(operator: string, id: string, { overlapSeconds = DEFAULT_OVERLAP_MS / 1000 }: Model<'Roll'>): Promise<Model<'RolledKey'>> {
    const rolled = await rollKey(this.deps.storage.keys, id, overlapSeconds * 1000, this.deps.now())
    if (!rolled) throw noKey(id, ' (or it is revoked)')
    // This instance takes the new secret at once; others find it on its first request (findLate's read).
    await this.deps.keys.reload()
    const endsAt = iso(rolled.previousEndsAt)!
    await this.audit(operator, 'key.roll', `${id} previous secret until ${endsAt}`)
    return { id, secret: rolled.secret, previousSecretEndsAt: endsAt }
  }

  /** Sets when the key expires (an ISO time still to come), or null for never. Audited. */
  async setExpiry(operator: string, id: string, { expiresAt }: Model<'ExpiryChange'>): Promise<void> {
    const at = expiresAt === null ? null : isoTimeMs(expiresAt)
    if (expiresAt !== null && at === null) throw badRequest(`expiresAt: ${FIELD_RULES.expiresAt}`)
    // As `keys set-expiry` says it: the time was read, and is not to come.
    if (at !== null && at <= this.deps.now()) throw badRequest(`expiresAt: must be a time still to come, not ${iso(at)}`)
    if (!(await this.deps.storage.keys.setExpiry(id, at))) throw noKey(id, ' (or it is revoked)')
    await this.deps.keys.reload()
    await this.audit(operator, 'key.set-expiry', `${id} ${expiresAt ?? 'never'}`)
  }

  /**
   * Current bans: of keys, as the limiter holds them (every instance's, when Redis is shared); of client
   * addresses, those this instance started, each looked at again (another instance may have lifted it).
   */
  async bans(): Promise<Model<'BanList'>> {
    const { keys, limiterAnswered } = await this.limiterRows()
    const bans: Model<'Ban'>[] = keys
      .filter(({ held }) => held && held.bannedUntil !== null)
      .map(({ record, held }) => ({ kind: 'key', keyId: record.id, keyName: record.name, bannedUntil: iso(held!.bannedUntil)! }))
    for (const { subject } of this.deps.limiter.bans(this.deps.now())) {
      if (subject.kind !== 'address') continue
      const held = await this.deps.limiter.inspect(subject, PLAN_LIMITS.free).catch(() => null)
      if (held?.bannedUntil) bans.push({ kind: 'address', address: subject.address, bannedUntil: iso(held.bannedUntil)! })
    }
    return { bans, limiterAnswered }
  }

  liftKeyBan(operator: string, id: string): Promise<void> {
    return this.resetLimits(operator, id, 'ban.lift')
  }

  /**
   * Idempotent: an address that is not banned is left as it is, and no audit entry says it was lifted.
   * The audit log names the address.
   */
  async liftAddressBan(operator: string, subject: AddressSubject): Promise<void> {
    const { bannedUntil } = await this.deps.limiter.inspect(subject, PLAN_LIMITS.free)
    if (bannedUntil === null) return
    await this.deps.limiter.liftAddress(subject)
    await this.audit(operator, 'ban.lift', subject.address)
  }

  async auditLog(limit: number): Promise<Model<'AuditLog'>['entries']> {
    return (await this.deps.storage.operators.auditLog(limit)).map((entry) => ({ ...entry, at: iso(entry.at)! }))
  }

  private audit(actor: string, action: string, target: string): Promise<void> | void {
    return this.deps.storage.operators.audit({ at: this.deps.now(), actor, action, target })
  }
}

/** A key as the console shows it: what the limiter holds of it (if it answered), and its usage (if any). */
function keyRow(record: ApiKeyRecord, held: Held | null, figures?: KeyUsage): Model<'Key'> {
  return {
    id: record.id,
    name: record.name,
    plan: record.plan,
    rpm: record.rpm,
    rpd: record.rpd,
    createdAt: iso(record.createdAt)!,
    lastUsedAt: iso(record.lastUsedAt),
    revokedAt: iso(record.revokedAt),
    expiresAt: iso(record.expiresAt),
    format: record.secretFormat,
    versions: secretUses(record).map(versionOf),
    dayQuotaLeft: held?.dayLeft ?? null,
    bannedUntil: iso(held?.bannedUntil ?? null),
    requestsToday: figures?.today.requests ?? 0,
    limitedToday: figures?.today.limited ?? 0,
    deprecatedWeek: figures?.deprecated.week ?? 0,
  }
}

function versionOf(use: SecretUse): Model<'Key'>['versions'][number] {
  return { version: use.secret, lastUsedAt: iso(use.lastUsedAt), endsAt: iso(use.endsAt) }
}

function columns(series: UsageSeries): Model<'Series'> {
  const column = <F extends keyof UsageSeries['points'][number]>(field: F) => series.points.map((point) => point[field])
  const { at: _at, ...total } = series.total
  return {
    resolution: series.resolution,
    from: iso(series.from)!,
    stepSeconds: RESOLUTION_MS[series.resolution] / 1000,
    ok: column('ok'),
    clientErrors: column('clientErrors'),
    limited: column('limited'),
    notImplemented: column('notImplemented'),
    serverErrors: column('serverErrors'),
    p50: column('p50'),
    p99: column('p99'),
    total,
  }
}

function noKey(id: string, why = ''): ApiError {
  return notFound(`No key with id "${id.slice(0, 64)}"${why}.`)
}

/** Adds to a set of at most MAX_REMEMBERED_MISSES, emptied when full. */
function remember(set: Set<string>, entry: string): void {
  if (set.size >= MAX_REMEMBERED_MISSES) set.clear()
  set.add(entry)
}
