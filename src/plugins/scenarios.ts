/**
 * Answers on request, so a client's retry, backoff and timeout code can be tried (docs/scenarios.md):
 * `Prefer: code=N, delay=MS, fail=N` (RFC 7240; Prism's `code`). The gate calls it after finding the key
 * and before the limiter: a forced answer, built as real ones are, spends no token and counts toward no
 * ban. A key the limiter would refuse now gets the limiter's refusal instead; when the limiter does not
 * answer in time, the scenario answers its 503, never with the real operation.
 */
import { integerRule, integerWithin } from '../domain/integer-range'
import { ApiError, badRequest, ClientClosedError, internalError, LIMITER_DOWN, petNotFound } from '../http/api-errors'
import { type Preference, parsePrefer, PreferSyntaxError } from '../http/prefer'
import type { RouteTable } from '../http/routes'
import { LimiterUnavailableError, TriesFullError } from '../limiter/backend'
import type { RateLimiter } from '../limiter/limiter'
import type { TryCounter } from '../limiter/tries'
import type { ActiveKey } from '../domain/api-key'
import { IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_RULE } from '../domain/idempotency'
import { HOUR_MS } from '../domain/time'
import { rateLimitHeaders, refusal } from './gate'
import { type AnswerSet, answerWith, type RequestInfo } from './request-info'

/** The statuses a request may force, where its operation documents them. */
const FORCEABLE = [404, 429, 500, 503]
const DELAY_MAX_MS = 10_000
const FAIL_MAX = 100
/** Delayed answers one key may have waiting at once: a delay holds a connection, and a forced one spends no token. */
const DELAYS_PER_KEY = 100
/** How long a count of tries (fail=N) is kept after its first try. */
const TRIES_KEPT_MS = HOUR_MS

export interface ScenarioOptions {
  limiter: Pick<RateLimiter, 'peek' | 'refuses' | 'exhausted'>
  /** Counts the tries of fail=N. */
  tries: TryCounter
  /** Filled before the server listens; tells the operation of a request and what it documents. */
  routes: Pick<RouteTable, 'operationAt' | 'documentedStatuses'>
  /** Aborted when the server's stop begins: delays waiting then end at once (STOPPING). */
  stopping: AbortSignal
}

/** What one request's Prefer asks of this operation, checked. */
interface Plan {
  /** The status to force on every try (no fail), or on the failing tries (with fail). */
  code: number | undefined
  delayMs: number | undefined
  /** The first `tries` tries under `idempotencyKey` get `code`. */
  fail: { tries: number; idempotencyKey: string } | undefined
}

/** The statuses `code` may force for an operation: the forceable ones it documents. */
function forceableCodes(documented: number[]): number[] {
  return FORCEABLE.filter((status) => documented.includes(status))
}

function integerIn(name: string, preference: Preference | undefined, min: number, max: number, unit = ''): number | undefined {
  if (!preference) return undefined
  const value = preference.value ?? ''
  const number = integerWithin(value, min, max, 6)
  if (number === undefined) throw badRequest(`Prefer ${name}: ${integerRule(min, max)}${unit}, not "${value.slice(0, 40)}"`)
  return number
}

function codeFor(operationId: string, documented: number[], value: string | undefined): number {
  const allowed = forceableCodes(documented)
  if (value === undefined || !/^\d{3}$/.test(value) || !allowed.includes(Number(value)))
    throw badRequest(`Prefer code: must be one of ${allowed.join(', ')} for ${operationId}, not "${(value ?? '').slice(0, 40)}"`)
  return Number(value)
}

/**
 * Reads the preferences this server knows from a Prefer value; undefined when it names none of them.
 * `fail=N; code=C` is RFC 7240's reading (code a parameter of fail); `fail=N, code=C`, two preferences,
 * is read alike. A fail without a code fails with 503.
 */
function planOf(header: string, operationId: string, documented: number[], idempotencyKey: string | null): Plan | undefined {
  let preferences: Map<string, Preference>
  try {
    preferences = parsePrefer(header)
  } catch (error) {
    throw error instanceof PreferSyntaxError ? badRequest(`Prefer: ${error.message}`) : error
  }
  const code = preferences.get('code')
  const fail = preferences.get('fail')
  const delay = preferences.get('delay')
  if (!code && !fail && !delay) return undefined
  const delayMs = integerIn('delay', delay, 0, DELAY_MAX_MS, ' (milliseconds)')
  if (!fail) return { code: code && codeFor(operationId, documented, code.value), delayMs, fail: undefined }

  const tries = integerIn('fail', fail, 0, FAIL_MAX, ' (tries)')!
  const ownCode = fail.params.get('code')
  if (code && fail.params.has('code') && ownCode !== code.value)
    throw badRequest('Prefer code: differs from the code parameter of fail; give one of them')
  if (idempotencyKey === null) throw badRequest('Prefer fail: needs an Idempotency-Key header, under which the tries are counted')
  if (!IDEMPOTENCY_KEY.test(idempotencyKey)) throw badRequest(`Idempotency-Key: ${IDEMPOTENCY_KEY_RULE}`)
  const failCode = fail.params.has('code') ? ownCode : code ? code.value : '503'
  return { code: codeFor(operationId, documented, failCode), delayMs, fail: { tries, idempotencyKey } }
}

/**
 * Waits `ms`, or until the server's stop begins ('stopped'); rejects with ClientClosedError as soon as the
 * client goes.
 */
function pause(ms: number, signal: AbortSignal, stopping: AbortSignal): Promise<'waited' | 'stopped'> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new ClientClosedError())
    if (stopping.aborted) return resolve('stopped')
    const settle = (outcome: () => void) => {
      clearTimeout(timer)
      signal.removeEventListener('abort', gone)
      stopping.removeEventListener('abort', stopped)
      outcome()
    }
    const gone = () => settle(() => reject(new ClientClosedError()))
    const stopped = () => settle(() => resolve('stopped'))
    const timer = setTimeout(() => settle(() => resolve('waited')), ms)
    signal.addEventListener('abort', gone, { once: true })
    stopping.addEventListener('abort', stopped, { once: true })
  })
}

/** A scenario's own bound is reached: a 503 to retry in `seconds`. */
const busy = (message: string, seconds: number) => new ApiError(503, 'unavailable', message, { 'retry-after': String(seconds) })

const TOO_MANY_DELAYS = busy(
  `At most ${DELAYS_PER_KEY} delayed answers (Prefer: delay) may wait at once for one key; retry when some have come.`,
  1,
)

/**
 * A delay waiting when a stop begins ends at once with this: the longest delay is as long as the drain's
 * grace, so a delayed create would race the drain's end and could be committed with its 201 never sent
 * (the connection cut). Nothing was done, so the retry, on the server that comes next, is safe.
 */
const STOPPING = busy('The server is stopping; retry in a moment.', 1)

/**
 * The scenario the gate runs for a request with a valid key: undefined at once without Prefer, else a
 * promise of the forced body, or of undefined for the request to go on. A Prefer it cannot honour is a 400.
 */
export function scenarios(options: ScenarioOptions) {
  const { limiter, tries, routes, stopping } = options
  const waiting = new Map<string, number>()

  /** Waits `ms` (or until the stop begins), counted among the key's waiting delays (run checks the bound first). */
  async function delayed(key: ActiveKey, ms: number, signal: AbortSignal): Promise<'waited' | 'stopped'> {
    waiting.set(key.id, (waiting.get(key.id) ?? 0) + 1)
    try {
      return await pause(ms, signal, stopping)
    } finally {
      const left = waiting.get(key.id)! - 1
      if (left === 0) waiting.delete(key.id)
      else waiting.set(key.id, left)
    }
  }

  /** `error` as the answer with the key's rate-limit fields, nothing taken; rejects like the limiter's peek. */
  async function withQuota(error: ApiError, key: ActiveKey, set: AnswerSet, info: RequestInfo): Promise<string> {
    rateLimitHeaders(set.headers, key.limits, await limiter.peek(key.subject, key.limits))
    return answerWith(set, info, error)
  }

  /** A scenario's own refusal (a bad Prefer, its bounds), answered like every error: with the key's rate-limit fields, or thrown without them. */
  async function refuse(error: ApiError, key: ActiveKey, set: AnswerSet, info: RequestInfo): Promise<string> {
    try {
      return await withQuota(error, key, set, info)
    } catch (down) {
      throw down instanceof LimiterUnavailableError ? error : down
    }
  }

  /** The real answer of that status, with the fields a real one carries; rejects when they cannot be read. */
  function forced(status: number, key: ActiveKey, set: AnswerSet, info: RequestInfo): Promise<string> | string {
    // The limiter does not answer: no rate-limit fields, Retry-After 1.
    if (status === 503) return answerWith(set, info, LIMITER_DOWN)
    if (status === 429) {
      const refused = limiter.exhausted(key.limits)
      rateLimitHeaders(set.headers, key.limits, refused.quota)
      return answerWith(set, info, refusal(refused))
    }
    return withQuota(status === 404 ? petNotFound(info.path.slice(info.path.lastIndexOf('/') + 1)) : internalError(), key, set, info)
  }

  /**
   * A scenario whose limiter does not answer in time (a refusal to read, tries to count) gets the 503 of a
   * limiter that does not answer. Never the real operation: a client that asked for a failure must not
   * get a real create, and the gate's own take may well be answered a moment later.
   */
  async function run(key: ActiveKey, request: Request, header: string, set: AnswerSet, info: RequestInfo): Promise<string | undefined> {
    try {
      return await answerFor(key, request, header, set, info)
    } catch (error) {
      if (!(error instanceof LimiterUnavailableError)) throw error
      return answerWith(set, info, LIMITER_DOWN)
    }
  }

  async function answerFor(
    key: ActiveKey,
    request: Request,
    header: string,
    set: AnswerSet,
    info: RequestInfo,
  ): Promise<string | undefined> {
    const operationId = routes.operationAt(request.method, info.path)
    if (operationId === undefined) return undefined
    let plan: Plan | undefined
    let refusal: ApiError | undefined
    try {
      plan = planOf(header, operationId, routes.documentedStatuses(operationId), request.headers.get('idempotency-key'))
    } catch (error) {
      if (!(error instanceof ApiError)) throw error
      refusal = error
    }
    // A Prefer naming nothing known here changes nothing, and costs no look at the limiter.
    if (!plan && !refusal) return undefined
    // A key the limiter would refuse (spent or banned) gets that refusal from the gate, whatever it prefers.
    if (await limiter.refuses(key.subject, key.limits)) return undefined
    info.key = key
    // A Prefer that cannot be honoured is answered like every 400; it spends no token.
    if (refusal) return refuse(refusal, key, set, info)
    if (!plan) return undefined
    const applied: string[] = []
    if (plan.delayMs !== undefined) {
      if ((waiting.get(key.id) ?? 0) >= DELAYS_PER_KEY) return refuse(TOO_MANY_DELAYS, key, set, info)
      if ((await delayed(key, plan.delayMs, request.signal)) === 'stopped') return refuse(STOPPING, key, set, info)
      applied.push(`delay=${plan.delayMs}`)
    }
    let code = plan.code
    if (plan.fail) {
      // Counted with the rate limits (in Redis, shared by every instance, when they are there).
      let tried: number
      try {
        tried = await tries.countTry(key.id, plan.fail.idempotencyKey, TRIES_KEPT_MS)
      } catch (error) {
        if (!(error instanceof TriesFullError)) throw error
        // The in-process count of tries is at its bound: a new Idempotency-Key is refused, never another key's count forgotten.
        const message = `Too many tries (Prefer: fail) are being counted at once; retry in ${error.retryAfter} s, when the oldest are forgotten.`
        return refuse(busy(message, error.retryAfter), key, set, info)
      }
      applied.push(`fail=${plan.fail.tries}`)
      if (tried > plan.fail.tries) code = undefined
    }
    let body: string | undefined
    if (code !== undefined) {
      body = await forced(code, key, set, info)
      applied.push(`code=${code}`)
    }
    if (applied.length) set.headers['preference-applied'] = applied.join(', ')
    return body
  }

  return function scenario(key: ActiveKey, request: Request, set: AnswerSet, info: RequestInfo): Promise<string | undefined> | undefined {
    const header = request.headers.get('prefer')
    return header === null ? undefined : run(key, request, header, set, info)
  }
}

/**
 * The `Prefer` parameter of an operation when scenarios are on: any text (RFC 7240 ignores unknown
 * preferences), its examples in the description only, as Swagger UI's Try it out would send an example.
 */
export function preferParameter(documented: number[], takesIdempotencyKey: boolean) {
  const codes = forceableCodes(documented)
  const backoff = codes.includes(503) ? 503 : codes[0]
  const examples = [
    ...codes.map((code) => `code=${code}`),
    'delay=2000',
    `code=${backoff}, delay=2000`,
    ...(takesIdempotencyKey && codes.includes(503) ? ['fail=2; code=503'] : []),
  ]
  return {
    name: 'Prefer',
    in: 'header',
    required: false,
    description:
      "Scenarios (RFC 7240), on this server only: `code=N` answers this operation's documented N as a real one looks " +
      `(one of ${codes.join(', ')}; no token spent), \`delay=MS\` (0 to ${DELAY_MAX_MS}) answers that much later` +
      (takesIdempotencyKey
        ? ', `fail=N; code=503` fails the first N tries under the same `Idempotency-Key` (needed: without one it is a 400)'
        : '') +
      '. The answer names what it applied in `Preference-Applied`. Preferences not known here are ignored; a known one ' +
      'with a bad value is a 400, and so is a value that is not a list of preferences as RFC 7240 writes them ' +
      '(`token[=value]`, each with optional `; parameter[=value]`, separated by commas; a value with spaces in double quotes), ' +
      'such as `code=` or `=503`: `Prefer: is not a list of preferences as RFC 7240 writes them (at character N)`. ' +
      `Leave it empty for the normal answer. Examples: ${examples.map((choice) => `\`${choice}\``).join(', ')}.`,
    schema: { type: 'string' },
  }
}
