/**
 * The gate of the API: bearer authentication (RFC 6750) and rate limiting, a hook of the API's own routes
 * (its fallback included), so no API handler runs without it. Requests without a valid key are limited
 * per client address with the Free plan's numbers, before the 401, so keys cannot be guessed at speed;
 * every answer carries the rate-limit fields of the bucket in force.
 */
import { Elysia } from 'elysia'
import { addressBanned, type ApiError, keyBanned, LIMITER_DOWN, rateLimited } from '../http/api-errors'
import { type Limits, PLAN_LIMITS } from '../domain/plans'
import { DAY_MS, MINUTE_MS } from '../domain/time'
import type { Decision, Quota, RateLimiter } from '../limiter/limiter'
import { LimiterUnavailableError } from '../limiter/backend'
import { bearerToken, INVALID_KEY, keyExpired, MISSING_KEY } from '../http/bearer-token'
import type { ActiveKey, KeyLookup } from '../domain/api-key'
import type { MaybePromise } from '../domain/repositories'
import type { Metrics } from '../observability/metrics'
import { isPreflight } from './cors'
import { waitedWhereNothingWaits } from '../domain/at-once'
import { answerWith, type RequestInfo, requestInfo } from './request-info'

export interface GateOptions {
  keys: KeyLookup
  limiter: RateLimiter
  metrics: Metrics
  corsEnabled: boolean
  now: () => number
  onBan: (subject: string, seconds: number) => void
  /** Answers forced by the request's Prefer (plugins/scenarios.ts), once the key is found; absent when off. */
  scenario?: (key: ActiveKey, request: Request, set: HookContext['set'], info: RequestInfo) => Promise<string | undefined> | undefined
}

// Refusals are the cheap path under abuse, so their error objects are made once and reused (the 401s
// with the bearer token's reading, http/bearer-token.ts).
const refusals = new Map<string, ApiError>()

// By the limits object itself (keys and plans keep theirs), so no string is made per request to find it.
const policies = new WeakMap<Limits, string>()
function policyOf(limits: Limits): string {
  let policy = policies.get(limits)
  if (!policy) {
    policy = `"minute";q=${limits.rpm};w=${MINUTE_MS / 1000}, "day";q=${limits.rpd};w=${DAY_MS / 1000}`
    policies.set(limits, policy)
  }
  return policy
}

export function rateLimitHeaders(headers: Record<string, unknown>, limits: Limits, quota: Quota): void {
  headers['x-ratelimit-limit'] = String(quota.limit)
  headers['x-ratelimit-remaining'] = String(quota.remaining)
  headers['x-ratelimit-reset'] = String(quota.resetAt)
  headers['ratelimit-policy'] = policyOf(limits)
  headers.ratelimit = `"${quota.window}";r=${quota.remaining};t=${quota.resetIn}`
}

/**
 * The rate-limit fields of a refusal given before the gate (a Host the router cannot read): those of the
 * bucket the gate would judge by (its key's, else its address's), nothing taken; LIMITER_DOWN when the
 * limiter does not answer.
 */
export async function standingFields(
  keys: Pick<KeyLookup, 'find'>,
  limiter: Pick<RateLimiter, 'peek'>,
  request: Request,
  info: RequestInfo,
  set: { headers: Record<string, unknown> },
): Promise<ApiError | undefined> {
  const token = bearerToken(request.headers.get('authorization'))
  const key = token ? keys.find(token) : undefined
  const limits = key ? key.limits : PLAN_LIMITS.free
  try {
    rateLimitHeaders(set.headers, limits, await limiter.peek(key ? key.subject : info.addressSubject, limits))
  } catch (error) {
    if (!(error instanceof LimiterUnavailableError)) throw error
    return LIMITER_DOWN
  }
}

const REFUSALS = { rate_limited: rateLimited, key_banned: keyBanned, address_banned: addressBanned }

/** A refusal; `byAddress` when the request was limited as its client address (no valid key). */
export function refusal({ reason, retryAfter, banAfter }: Extract<Decision, { allowed: false }>, byAddress = false): ApiError {
  const code = reason === 'key_banned' && byAddress ? 'address_banned' : reason
  const id = `${code} ${retryAfter} ${banAfter}`
  let error = refusals.get(id)
  if (!error) {
    error = REFUSALS[code](retryAfter, banAfter)
    if (refusals.size >= 10_000) refusals.clear()
    refusals.set(id, error)
  }
  return error
}

/** The gate as a hook of the instance that uses it (`scoped`): the API, and every route it holds. */
export function gate(options: GateOptions) {
  const { keys, limiter, metrics, corsEnabled, now, onBan, scenario } = options

  /** Applies a decision: the rate-limit fields, the key for the handler, and the refusal if any. */
  const judge = (
    set: { headers: Record<string, unknown> },
    info: RequestInfo,
    token: string | undefined,
    key: ActiveKey | undefined,
    expired: ActiveKey | undefined,
    limits: Limits,
    decision: Decision,
  ): ApiError | undefined => {
    rateLimitHeaders(set.headers, limits, decision.quota)
    if (key) {
      info.key = key
      keys.markUsed(key, now())
    }
    if (!decision.allowed) {
      metrics.rateLimited(decision.reason)
      if (decision.bannedNow) {
        metrics.banned()
        onBan(key ? `key ${key.id}` : `address ${info.addressSubject.address}`, decision.retryAfter)
      }
      return refusal(decision, !key)
    }
    if (!key) return token === undefined ? MISSING_KEY : expired ? keyExpired(expired) : INVALID_KEY
  }

  /**
   * The gate's answer: a refusal's body, or undefined to let the request through; a promise only while
   * something it needs is read (a key from PostgreSQL, a shared limiter, a scenario's count). An unknown
   * token is looked for in storage first (a key made a moment ago; modules/keys/service.ts): a key found
   * is limited as itself and never costs its address; a token that stays unknown, or a secret past its
   * end (expired), costs the address. Refusals are returned, not thrown: they are the hot path under abuse.
   */
  function admit(request: Request, set: HookContext['set'], info: RequestInfo): MaybePromise<string | undefined> {
    if (corsEnabled && isPreflight(request)) return undefined
    const token = bearerToken(request.headers.get('authorization'))
    let found: MaybePromise<ActiveKey | undefined> = token ? keys.find(token) : undefined
    if (token && !found) found = keys.findLate(token)
    return found instanceof Promise
      ? found.then((late) => admitAs(late, token, request, set, info))
      : admitAs(found, token, request, set, info)
  }

  function admitAs(
    found: ActiveKey | undefined,
    token: string | undefined,
    request: Request,
    set: HookContext['set'],
    info: RequestInfo,
  ): MaybePromise<string | undefined> {
    // Most keys never expire: their requests read no clock here.
    const expired = found && found.endsAt !== Infinity && found.endsAt <= now() ? found : undefined
    const key = expired ? undefined : found
    const forced = key && scenario?.(key, request, set, info)
    if (forced)
      return forced.then(
        (body) => body ?? limit(key, expired, token, set, info),
        (error: unknown) => limiterDown(error, set, info),
      )
    return limit(key, expired, token, set, info)
  }

  /** The limiter's decision, applied: see judge. */
  function limit(
    key: ActiveKey | undefined,
    expired: ActiveKey | undefined,
    token: string | undefined,
    set: HookContext['set'],
    info: RequestInfo,
  ): MaybePromise<string | undefined> {
    const limits = key ? key.limits : PLAN_LIMITS.free
    let decision: MaybePromise<Decision>
    try {
      decision = limiter.check(key ? key.subject : info.addressSubject, limits)
    } catch (error) {
      return limiterDown(error, set, info)
    }
    if (!(decision instanceof Promise)) return refused(judge(set, info, token, key, expired, limits, decision), set, info)
    return decision.then(
      (made) => refused(judge(set, info, token, key, expired, limits, made), set, info),
      (error: unknown) => limiterDown(error, set, info),
    )
  }

  // Elysia reads a hook's source text to decide whether to await it, and an awaited gate costs every
  // request a turn of the event loop (5–10 % of its CPU, measured): where nothing the gate asks can
  // wait, it is declared to answer at once, its context destructured so Elysia builds only that.
  function gateAtOnce({ request, set, info }: HookContext) {
    const answer = admit(request, set, info)
    if (answer instanceof Promise) throw waitedWhereNothingWaits('the gate', answer)
    return answer
  }
  async function gateWaiting({ request, set, info }: HookContext) {
    return await admit(request, set, info)
  }

  // Nothing the gate asks can wait when the keys are read at once, the limiter is this process's, and no
  // scenario counts tries.
  const answersAtOnce = keys.answersAtOnce && !limiter.shared && !scenario
  return new Elysia({ name: 'gate' }).use(requestInfo).onBeforeHandle({ as: 'scoped' }, answersAtOnce ? gateAtOnce : gateWaiting)
}

/** A refusal's body, or undefined to let the request through. */
function refused(refusal: ApiError | undefined, set: HookContext['set'], info: RequestInfo): string | undefined {
  return refusal && answerWith(set, info, refusal)
}

/** A refusal's body when the limiter does not answer; any other failure is thrown on. */
function limiterDown(error: unknown, set: HookContext['set'], info: RequestInfo): string {
  if (!(error instanceof LimiterUnavailableError)) throw error
  return answerWith(set, info, LIMITER_DOWN)
}

type HookContext = { request: Request; set: { headers: Record<string, unknown> }; info: RequestInfo }
