/**
 * The limiter's state in Redis, shared by every instance: one atomic script per take (script.ts), the
 * takes of one event-loop turn sent in one call, so decisions are exact however many instances serve a
 * subject; keys that expire once their state no longer matters, and a bound on the addresses held, so
 * Redis's memory stays bounded under an address spray.
 *
 * Failing is part of the design. A call that gets no answer within the timeout throws
 * LimiterUnavailableError, and must never take a token later: the offline queue is off (nothing is
 * sent while disconnected), and each script carries the time, on Redis's clock, after which it must
 * change nothing (a script sent just before Redis stalled would otherwise still run when Redis resumes).
 * A script that ran in time can still answer after the timeout (our process or the network was slow):
 * what such a take changed is undone, so a call answered 503 spends nothing and counts toward nothing.
 * For that, a connection that still answers is never replaced, however slow: the answers it carries
 * would be lost, and the takes Redis ran for them never undone. Only a connection silent for
 * connectTimeoutMs is, and it is kept open for UNDO_KEEP_MS after that (as long as Redis keeps what an
 * undo needs): a stall of the network or of either process, not a dead peer, still delivers its answers
 * there, and each late take is undone on the connection that carried it. What Redis ran for takes whose
 * answers never come stays done.
 * The client does not reconnect by itself (Bun's own retries give up for good after about 32 s, and a
 * connect() during them waits for all of them): the backend checks Redis every reconnectEveryMs, idle or
 * not, and reconnects in the background, one attempt at a time, however long Redis was away.
 */
import { randomBytes } from 'node:crypto'
import type { Limits } from '../../domain/plans'
import type { Subject } from '../../domain/subject'
import {
  type BanRule,
  type Inspected,
  LimiterUnavailableError,
  type Patience,
  type PeekResult,
  type SharedBackend,
  shapesOf,
  type TakeResult,
  TRIES_PER_KEY,
} from '../backend'
import { fullBucket, refill } from '../token-bucket'
import { COUNT_SCRIPT, FORGET_SCRIPT, LIMITER_SCRIPT, PEEK_SCRIPT, UNDO_KEEP_MS, UNDO_SCRIPT } from './script'

export interface RedisBackendOptions {
  /** redis://[user:password@]host:port[/db], or rediss:// for TLS. */
  url: string
  /** Prepended to every key the backend writes. Default 'petstore:'. */
  prefix?: string
  /** How long a request's call (a take, a peek, a try's count) may take before it fails with LimiterUnavailableError. Default 100 ms. */
  timeoutMs?: number
  /** The same for what answers a person (Patience): the console's reads and lifts, `keys usage`'s bans. Default 2,000 ms. */
  personTimeoutMs?: number
  /** Least time between two reconnect attempts, and between two checks that Redis answers. Default 500 ms. */
  reconnectEveryMs?: number
  /** How long a reconnect may take, and how long an open connection may stay silent to a PING before it is replaced. Default 1000 ms. */
  connectTimeoutMs?: number
  /** Most client addresses Redis holds at once, for every instance together. Default 100,000. */
  maxAddresses?: number
}

/** The take script's answer: flags as '0'/'1', fractions and times as '%.17g'. */
type Answer = [
  allowed: string,
  bannedNow: string,
  m: string,
  mt: string,
  d: string,
  dt: string,
  bannedUntil: string,
  now: string,
  clock: string,
  generation: string,
  counted: string,
  turnsBefore: string,
  turns: string,
]

/** A take waiting for its script call's answer. */
interface Pending {
  name: string
  take: string
  giveUpAt: number
  resolve: (result: TakeResult) => void
  reject: (error: unknown) => void
}

const hash = (script: string) => new Bun.CryptoHasher('sha1').update(script).digest('hex')
const SCRIPTS = [LIMITER_SCRIPT, PEEK_SCRIPT, COUNT_SCRIPT, UNDO_SCRIPT, FORGET_SCRIPT]
const SHAS = new Map(SCRIPTS.map((script) => [script, hash(script)]))

// Most takes one script call carries. Redis's time per take falls with up to 16 to a call (25-32 µs
// against 45-69 alone) and grows past 24 (100-130 µs with 64): a call holds Redis about half a millisecond.
const BATCH_TAKES = 16

// A lower bound of the clock offset is renewed at least this often, in case either clock was set.
const OFFSET_RENEWAL_MS = 10_000

export class RedisLimiterBackend implements SharedBackend {
  private client: Bun.RedisClient
  /** Connections replaced for their silence, open a while for the answers they may still carry. */
  private readonly retired = new Set<Bun.RedisClient>()
  private readonly newClient: () => Bun.RedisClient
  private readonly prefix: string
  private readonly timeoutMs: number
  private readonly personTimeoutMs: number
  private readonly reconnectEveryMs: number
  private readonly connectTimeoutMs: number
  private readonly maxAddresses: string
  /** What every take says the same: the ban rule, and the prefix's length in bytes (the script splits keys by it). */
  private readonly ruleFields: string
  private readonly prefixBytes: number
  /** Names this backend's calls apart from every other instance's, for the subjects' generations. */
  private readonly instance = randomBytes(9).toString('base64url')
  private calls = 0
  /** Takes waiting for this turn's script call. */
  private batch: Pending[] = []
  private readonly health: ReturnType<typeof setInterval>
  /**
   * A lower bound of Redis's clock minus performance.now(), from the latest replies, to turn the time a
   * call gives up at into Redis's clock. Erring low only makes a script refuse a little early.
   */
  private offset: number | null = null
  private offsetMeasuredAt = 0
  private reconnecting: Promise<void> | null = null
  /** Set once a connection was ready: from then on a lost one is failed at once, not waited for. */
  private hasConnected = false
  private lastReconnect = -Infinity
  private closed = false
  failure: string | null = null
  /** See LimiterBackend.lifts: read with every health check. */
  lifts: string | undefined = undefined

  constructor(
    private readonly rule: BanRule,
    options: RedisBackendOptions,
  ) {
    this.prefix = options.prefix ?? 'petstore:'
    this.timeoutMs = options.timeoutMs ?? 100
    this.personTimeoutMs = options.personTimeoutMs ?? 2_000
    this.reconnectEveryMs = options.reconnectEveryMs ?? 500
    this.connectTimeoutMs = options.connectTimeoutMs ?? 1000
    const maxAddresses = options.maxAddresses ?? 100_000
    if (!Number.isInteger(maxAddresses) || maxAddresses < 1) throw new RangeError('maxAddresses must be a positive integer')
    this.maxAddresses = String(maxAddresses)
    this.ruleFields = `${rule.banAfter} ${rule.banSeconds}`
    this.prefixBytes = Buffer.byteLength(this.prefix)
    this.newClient = () =>
      new Bun.RedisClient(options.url, { enableOfflineQueue: false, autoReconnect: false, connectionTimeout: this.connectTimeoutMs })
    this.client = this.newClient()
    this.reconnect()
    // An idle instance learns of a lost Redis, and reconnects, before its next request needs Redis.
    this.health = setInterval(() => this.checkHealth(), this.reconnectEveryMs)
    this.health.unref()
  }

  /**
   * A take, bounded by the timeout: it joins this turn's script call (sendTake), whose one timer bounds
   * every take it carries. Before a connection is ready it waits for it, within the same bound.
   */
  take(subject: Subject, limits: Limits, now?: number): Promise<TakeResult> {
    const giveUpAt = performance.now() + this.timeoutMs
    if (this.ready) return this.sendTake(subject, limits, now, giveUpAt)
    return this.bounded(this.connected(giveUpAt), giveUpAt).then(() => this.sendTake(subject, limits, now, giveUpAt))
  }

  /** Read as the take script reads it: a subject not held, or held with other limits, starts full. */
  peek({ name }: Subject, limits: Limits, now?: number): Promise<PeekResult> {
    return this.run<string[]>(PEEK_SCRIPT, [this.hashOf(name)], []).then(([clock, rpm, rpd, m, mt, d, dt, b]) => {
      const at = now ?? Number(clock)
      const shape = shapesOf(limits)
      if (Number(rpm) !== limits.rpm || Number(rpd) !== limits.rpd)
        return { minute: fullBucket(shape.minute, at), day: fullBucket(shape.day, at), bannedUntil: 0, now: at }
      const minute = { tokens: Number(m), updatedAt: Number(mt) }
      const day = { tokens: Number(d), updatedAt: Number(dt) }
      refill(minute, shape.minute, at)
      refill(day, shape.day, at)
      return { minute, day, bannedUntil: Number(b || 0), now: at }
    })
  }

  /** A group's tries share one hash; a count lives at least keepMs after its first try, by Redis's clock. */
  countTry(group: string, id: string, keepMs: number): Promise<number> {
    return this.run<number>(COUNT_SCRIPT, [`${this.prefix}t:${group}`], [id, String(keepMs), String(TRIES_PER_KEY)])
  }

  /** With `seq` (the reset's number), applied once however many instances share Redis and ask. */
  forget({ name }: Subject, seq?: number, patience: Patience = 'request'): Promise<void> {
    const keys = [...this.keysOf(name), `${this.prefix}resets`, `${this.prefix}lifts`]
    const patienceMs = patience === 'person' ? this.personTimeoutMs : this.timeoutMs
    return this.within(patienceMs, () => this.evaluate(FORGET_SCRIPT, keys, [name, seq === undefined ? '' : String(seq)])).then(
      () => undefined,
    )
  }

  /** One HMGET of the subject's hash, on Redis's clock as last measured. */
  inspect({ name }: Subject): Promise<Inspected | null> {
    const hash = this.hashOf(name)
    return this.within(this.personTimeoutMs, () => this.client.send('HMGET', [hash, 'rpm', 'rpd', 'd', 'dt', 'b'])).then((reply) => {
      const [rpm, rpd, d, dt, b] = reply as (string | null)[]
      if (rpm == null || d == null) return null
      return {
        limits: { rpm: Number(rpm), rpd: Number(rpd) },
        day: { tokens: Number(d), updatedAt: Number(dt) },
        bannedUntil: Number(b ?? 0),
        now: performance.now() + this.offset!,
      }
    })
  }

  /** Whether Redis answers a PING within the timeout, or `patienceMs` (readiness, the jobs' watch). */
  async ping(patienceMs = this.timeoutMs): Promise<boolean> {
    try {
      await this.within(patienceMs, () => this.client.send('PING', []))
      return true
    } catch {
      return false
    }
  }

  close(): void {
    this.closed = true
    clearInterval(this.health)
    this.client.close()
    for (const client of this.retired) client.close()
  }

  /**
   * The takes sent within one turn of the event loop share one script call (Bun.redis costs our process
   * about as much per call as per take), and one timer at a time (sendBatch): each is decided as if sent
   * alone, in turn, by its own deadline. At most BATCH_TAKES a call, so one call never holds Redis, which
   * runs one script at a time for every instance, for long.
   */
  private sendTake(subject: Subject, limits: Limits, now: number | undefined, giveUpAt: number): Promise<TakeResult> {
    const call = `${this.instance}.${(++this.calls).toString(36)}`
    // Redis's clock has been read once connected: the deadline can be said on it.
    const take = `${limits.rpm} ${limits.rpd} ${this.ruleFields} ${giveUpAt + this.offset!} ${now ?? ''} ${call} ${subject.kind === 'key' ? '' : this.maxAddresses} ${this.prefixBytes}`
    const { promise, resolve, reject } = Promise.withResolvers<TakeResult>()
    if (this.batch.length === 0) setImmediate(() => this.sendBatch())
    this.batch.push({ name: subject.name, take, giveUpAt, resolve, reject })
    if (this.batch.length === BATCH_TAKES) this.sendBatch()
    return promise
  }

  /**
   * Sends the batch with one timer at a time, set to the earliest deadline of the takes still waiting:
   * each take fails with LimiterUnavailableError at its own deadline (takes that waited for a first
   * connection share a call with new ones), and what Redis did for a take whose answer comes after
   * that is undone.
   */
  private sendBatch(): void {
    const batch = this.batch
    if (batch.length === 0) return
    this.batch = []
    const client = this.client
    const waiting = new Set(batch)
    let timer: ReturnType<typeof setTimeout> | undefined
    const arm = () => {
      let next = Infinity
      for (const { giveUpAt } of waiting) next = Math.min(next, giveUpAt)
      timer = next === Infinity ? undefined : setTimeout(giveUp, Math.max(0, next - performance.now()))
    }
    const giveUp = () => {
      const now = performance.now()
      const late = [...waiting].filter((take) => take.giveUpAt <= now)
      if (late.length > 0) {
        const error = new LimiterUnavailableError(`Redis did not answer within ${this.timeoutMs} ms`)
        for (const take of late) {
          waiting.delete(take)
          take.reject(error)
        }
        this.reconnect()
      }
      arm()
    }
    arm()
    this.evaluate<string[]>(
      LIMITER_SCRIPT,
      batch.map(({ name }) => this.hashOf(name)),
      batch.map(({ take }) => take),
      client,
    ).then(
      (answers) => {
        clearTimeout(timer)
        for (const [i, take] of batch.entries()) {
          try {
            const reply = answers[i]!.split(' ') as Answer
            if (!waiting.has(take)) this.undo(take.name, reply, client)
            else if (reply[0] !== 'late' && reply[0] !== 'error') take.resolve(this.takenFrom(reply))
            else {
              this.reconnect()
              take.reject(this.refusedTake(reply))
            }
          } catch (error) {
            take.reject(new LimiterUnavailableError('Redis failed', { cause: error }))
          }
        }
      },
      (error: unknown) => {
        clearTimeout(timer)
        if (waiting.size === 0) return
        this.reconnect()
        const failed = error instanceof LimiterUnavailableError ? error : new LimiterUnavailableError('Redis failed', { cause: error })
        for (const take of waiting) take.reject(failed)
      },
    )
  }

  private takenFrom(reply: Answer): TakeResult {
    this.noteClock(Number(reply[8]))
    return {
      allowed: reply[0] === '1',
      minute: { tokens: Number(reply[2]), updatedAt: Number(reply[3]) },
      day: { tokens: Number(reply[4]), updatedAt: Number(reply[5]) },
      bannedUntil: Number(reply[6]),
      bannedNow: reply[1] === '1',
      now: Number(reply[7]),
      // The turns lead with the time the last refusal told.
      retryAt: Number.parseFloat(reply[12]),
    }
  }

  /** Why a take changed nothing: it reached Redis after its deadline, or the script refused it. */
  private refusedTake(reply: string[]): LimiterUnavailableError {
    if (reply[0] === 'late') {
      this.noteClock(Number(reply[1]))
      return new LimiterUnavailableError('Redis ran the take after the caller gave up; it changed nothing')
    }
    return new LimiterUnavailableError('Redis failed', { cause: new Error(`Redis refused the take: ${reply.slice(1).join(' ')}`) })
  }

  /**
   * Undoes a take whose answer came after the caller gave up, on the connection that carried it (a late
   * answer may come on one replaced since), when it changed anything: it took a token, recorded a
   * rejection or started a ban (a take refused by a ban in force, or run late, changed nothing). One
   * attempt: when Redis fails it too, the take stays done.
   */
  private undo(name: string, reply: Answer, client: Bun.RedisClient): void {
    if (reply[0] === 'late' || reply[0] === 'error') return
    const [allowed, bannedNow, , , , , bannedUntil, now, , generation, counted, turnsBefore, turns] = reply
    if (allowed === '0' && bannedNow === '0' && Number(bannedUntil) > Number(now)) return
    const args = [generation, allowed, bannedNow, now, bannedUntil, String(this.rule.banAfter), counted, turnsBefore, turns]
    this.evaluate(UNDO_SCRIPT, this.keysOf(name), args, client).catch(() => {})
  }

  /**
   * Checks that Redis answers, reconnecting when it does not: a failed check starts a reconnect. The
   * check reads the count of lifts, so a ban lifted on another instance is let go here within it.
   */
  private checkHealth(): void {
    if (this.reconnecting) return
    if (!this.client.connected || this.offset === null) this.reconnect()
    else
      this.bounded(this.client.send('GET', [`${this.prefix}lifts`]), performance.now() + this.connectTimeoutMs, this.connectTimeoutMs).then(
        (count) => {
          this.lifts = String(count ?? 0)
        },
        () => {},
      )
  }

  /** Whether a connection is ready: connected, and Redis's clock read on it. */
  private get ready(): boolean {
    return this.client.connected && this.offset !== null
  }

  /** Waits for a connect under way (the first one, or a reconnect); commands would fail meanwhile. */
  private async connected(giveUpAt: number, patienceMs = this.timeoutMs): Promise<void> {
    if (!this.ready) {
      // Before the first connection, calls wait for it (a server that has just started). Once Redis has
      // been lost, they fail at once while it is reconnected in the background, instead of each one
      // spending the whole timeout while Redis is away (a 503, or the local fallback, without delay).
      if (this.hasConnected) {
        this.reconnect()
        throw new LimiterUnavailableError('Redis is not connected')
      }
      await this.reconnecting
    }
    if (!this.ready) throw new LimiterUnavailableError('Redis is not connected')
    // The caller gave up while the connect went on: sending now would be sending late.
    if (performance.now() >= giveUpAt) throw new LimiterUnavailableError(`Redis did not answer within ${patienceMs} ms`)
  }

  /** `send` once connected, the whole bounded by `patienceMs`. */
  private within<T>(patienceMs: number, send: () => Promise<T>): Promise<T> {
    const giveUpAt = performance.now() + patienceMs
    return this.bounded(this.connected(giveUpAt, patienceMs).then(send), giveUpAt, patienceMs)
  }

  /** A script call, once connected, bounded by a request's timeout. */
  private run<T>(script: string, keys: string[], args: string[]): Promise<T> {
    return this.within(this.timeoutMs, () => this.evaluate<T>(script, keys, args))
  }

  private async evaluate<T>(script: string, keys: string[], args: string[], client = this.client): Promise<T> {
    try {
      return await client.send('EVALSHA', [SHAS.get(script)!, String(keys.length), ...keys, ...args])
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error
      // Redis restarted or its script cache was flushed: EVAL runs the script and caches it again.
      return await client.send('EVAL', [script, String(keys.length), ...keys, ...args])
    }
  }

  // Separate key spaces for hashes and lists, so no subject's name can make it another's key: the
  // subject's hash, its rejections, and the rejections its last ban start set aside.
  private keysOf(name: string): string[] {
    return [this.hashOf(name), `${this.prefix}r:${name}`, `${this.prefix}h:${name}`]
  }

  /** The subject's hash: what a take, a peek and the console's read need alone. */
  private hashOf(name: string): string {
    return `${this.prefix}s:${name}`
  }

  /**
   * `work`, failing with LimiterUnavailableError once giveUpAt passes or when it fails; a failure starts
   * a reconnect in the background.
   */
  private bounded<T>(work: Promise<T>, giveUpAt: number, patienceMs = this.timeoutMs): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => {
          this.reconnect()
          reject(new LimiterUnavailableError(`Redis did not answer within ${patienceMs} ms`))
        },
        Math.max(0, giveUpAt - performance.now()),
      )
      work.then(
        (value) => {
          // After the timer, the promise has settled: the value is dropped.
          clearTimeout(timer)
          resolve(value)
        },
        (error: unknown) => {
          clearTimeout(timer)
          this.reconnect()
          reject(error instanceof LimiterUnavailableError ? error : new LimiterUnavailableError('Redis failed', { cause: error }))
        },
      )
    })
  }

  /** Starts reconnecting in the background unless an attempt is under way or the last one was too recent. */
  private reconnect(): void {
    const at = performance.now()
    if (this.closed || this.reconnecting || at - this.lastReconnect < this.reconnectEveryMs) return
    this.lastReconnect = at
    this.reconnecting = this.connect()
      .then(() => {
        this.failure = null
      })
      // The next failing call tries again; meanwhile the start's warning says why.
      .catch((error) => {
        this.failure = connectFailure(error)
      })
      .finally(() => {
        this.reconnecting = null
      })
  }

  /**
   * One attempt, bounded by connectTimeoutMs as a whole: a peer that accepts the connection and then
   * stays silent must not hold up the next attempt until TCP gives up.
   */
  private async connect(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        this.dropConnection()
        reject(new LimiterUnavailableError(`Redis did not finish connecting within ${this.connectTimeoutMs} ms`))
      }, this.connectTimeoutMs)
    })
    try {
      await Promise.race([this.attemptConnect(), timeout])
    } finally {
      clearTimeout(timer)
    }
  }

  /** A connection that looks open but stays silent (a dead peer, a lost network) is replaced; see the header. */
  private async attemptConnect(): Promise<void> {
    if (this.client.connected && this.offset !== null && (await this.answers())) return
    if (this.client.connected && this.offset !== null) this.dropConnection()
    if (!this.client.connected) {
      await this.client.connect()
      // Perhaps another server, with another clock: its offset is measured afresh.
      this.offset = null
    }
    for (const script of SCRIPTS) await this.client.send('SCRIPT', ['LOAD', script])
    const [seconds, micros] = (await this.client.send('TIME', [])) as [string, string]
    this.noteClock(Number(seconds) * 1000 + Number(micros) / 1000)
    this.hasConnected = true
  }

  /**
   * Gives up the current connection: one that was open is kept a while on a client of its own (see the
   * header), so the answers it still carries arrive; the next connect opens a new one.
   */
  private dropConnection(): void {
    const client = this.client
    if (!client.connected) {
      client.close()
      return
    }
    this.client = this.newClient()
    this.retired.add(client)
    setTimeout(() => {
      this.retired.delete(client)
      client.close()
    }, UNDO_KEEP_MS).unref()
  }

  private answers(): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const silence = setTimeout(resolve, this.connectTimeoutMs, false)
      this.client
        .send('PING', [])
        .then(
          () => resolve(true),
          () => resolve(false),
        )
        .finally(() => clearTimeout(silence))
    })
  }

  /** Takes Redis's clock as read by a reply received just now: a lower bound of the offset. */
  private noteClock(clock: number): void {
    const receivedAt = performance.now()
    const offset = clock - receivedAt
    if (this.offset === null || offset > this.offset || receivedAt - this.offsetMeasuredAt > OFFSET_RENEWAL_MS) {
      this.offset = offset
      this.offsetMeasuredAt = receivedAt
    }
  }
}

/** Why a connect failed, for an operator: the URL, which may hold a password, is never part of it. */
function connectFailure(error: unknown): string {
  if (error instanceof LimiterUnavailableError) return error.message
  const { code, message } = error as { code?: string; message?: string }
  // Bun's client says only this for a refused port and for a user or password Redis refused alike.
  if (code === 'ERR_REDIS_CONNECTION_CLOSED')
    return 'the connection closed while connecting: nothing listens there, or Redis refused the user or password in the URL'
  // Redis's own refusals (ERR DB index is out of range, NOPERM, …) say what is wrong.
  return message ?? String(error)
}
