/**
 * Reads a JSON request body strictly: the right media type, a size cap enforced while reading, valid
 * UTF-8, valid JSON without repeated member names, every number exactly as its digits say (an integer
 * beyond 2^53 as a bigint) and no string that storage would alter. A body must arrive within a
 * deadline, and the bytes of the bodies being received at once are bounded, so half-sent bodies cannot
 * hold connections and memory.
 */
import {
  ApiError,
  badRequest,
  ClientClosedError,
  JSON_TYPE,
  payloadTooLarge,
  requestTimeout,
  unsupportedContentCoding,
  unsupportedMediaType,
} from './api-errors'
import { withDeadline } from '../domain/time'

const decoder = new TextDecoder('utf-8', { fatal: true })

/** Stands in for a number whose text is not exactly a value we can hold; fails every schema. */
class InexactNumber {
  constructor(readonly source: string) {}
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)
/** Digits beyond which a literal's integer is out of every range we take: no need to compute it. */
const MAX_INTEGER_DIGITS = 40

/**
 * The integer a JSON number literal (12, 1.0, 1e3) denotes, exactly; null for no integer (1.5), undefined
 * for one of more than MAX_INTEGER_DIGITS digits (too long for any field).
 */
export function integerDenoted(source: string): bigint | null | undefined {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(source)
  if (!match) return null
  const [, sign, whole, fraction = '', exponentText = '0'] = match
  let digits = (whole! + fraction).replace(/^0+(?=\d)/, '')
  let exponent = Number(exponentText) - fraction.length
  while (digits.length > 1 && digits.endsWith('0')) {
    digits = digits.slice(0, -1)
    exponent++
  }
  if (digits === '0') return 0n
  if (exponent < 0) return null
  if (digits.length + exponent > MAX_INTEGER_DIGITS) return undefined
  const exact = BigInt(digits) * 10n ** BigInt(exponent)
  return sign ? -exact : exact
}

/**
 * Numbers as their literal says: an integer is a number when safe and a bigint beyond (int64 schemas take
 * it); a literal JSON.parse rounded to an integer (1.0000000000000001, 1e400) is an InexactNumber, which
 * fails every schema.
 */
function strictValues(this: unknown, key: string, value: unknown, context?: { source?: string }): unknown {
  // A lone surrogate cannot be stored as UTF-8: it would come back as U+FFFD, a silent change.
  if (typeof value === 'string' && !value.isWellFormed()) throw badRequest(`${key || 'body'}: is not valid Unicode text (lone surrogate)`)
  if (typeof value !== 'number' || context?.source === undefined) return value
  const source = context.source
  if (Number.isSafeInteger(value) && /^-?\d+$/.test(source)) return value
  const exact = integerDenoted(source)
  if (exact === undefined) return new InexactNumber(source)
  if (exact === null) return Number.isInteger(value) ? new InexactNumber(source) : value
  return exact >= -MAX_SAFE && exact <= MAX_SAFE ? Number(exact) : exact
}

/** How long a body may take to arrive once its read begins; a client that stalls is cut off then. */
export const BODY_DEADLINE_MS = 5_000
export interface BodyBudgetOptions {
  /** The most of `bytes` one client address may hold, so that one client cannot spend them all. */
  perAddress?: number
  /** How long a body may take to arrive once its read begins; BODY_DEADLINE_MS unless said. */
  deadlineMs?: number
}

/**
 * The bytes of bodies being received at once (declared length, else the cap); beyond it a body gets 503
 * and its connection closes, so half-sent bodies cannot grow memory. Each listener has its own budget,
 * so bodies half-sent to the console (sign-in needs no credentials) cannot starve the API.
 */
export class BodyBudget {
  private inFlight = 0
  /**
   * Bytes held by each client address with a body of some bytes in flight: an entry per such body at
   * most, so the map is bounded by the budget itself.
   */
  private readonly byAddress = new Map<string, number>()
  readonly deadlineMs: number

  constructor(
    readonly bytes: number,
    private readonly options: BodyBudgetOptions = {},
  ) {
    this.deadlineMs = options.deadlineMs ?? BODY_DEADLINE_MS
  }

  /** Holds `size` bytes (for `address`) until `give` hands them back; false, holding nothing, when they do not fit. */
  take(size: number, address?: string): boolean {
    if (this.inFlight + size > this.bytes) return false
    const { perAddress } = this.options
    if (perAddress !== undefined && address !== undefined && size > 0) {
      const held = this.byAddress.get(address) ?? 0
      if (held + size > perAddress) return false
      this.byAddress.set(address, held + size)
    }
    this.inFlight += size
    return true
  }

  give(size: number, address?: string): void {
    this.inFlight -= size
    const held = address === undefined ? undefined : this.byAddress.get(address)
    if (held === undefined) return
    if (held > size) this.byAddress.set(address!, held - size)
    else this.byAddress.delete(address!)
  }
}

/** The API's bodies in flight: 256 bodies of 64 KiB. */
const API_BODIES = new BodyBudget(16 * 1024 * 1024)

const BUSY = new ApiError(503, 'unavailable', 'Too many request bodies are arriving at once; retry in a second.', {
  'retry-after': '1',
  connection: 'close',
})

/** The request's body was never read although it has one: the connection cannot carry another request. */
export function bodyUnread(request: Request): boolean {
  if (request.bodyUsed) return false
  const length = request.headers.get('content-length')
  return (length !== null && length !== '0') || request.headers.has('transfer-encoding')
}

async function readCapped(request: Request, maxBytes: number, budget: BodyBudget, address?: string): Promise<Uint8Array> {
  const declared = request.headers.get('content-length')
  if (declared !== null && Number(declared) > maxBytes) throw payloadTooLarge(maxBytes)
  const reserved = declared === null ? maxBytes : Number(declared)
  if (!budget.take(reserved, address)) throw BUSY
  try {
    // With a declared length within the cap, Bun holds at most that much: read it in one go.
    const read = declared === null ? readChunks(request, maxBytes) : request.bytes()
    return await withDeadline(read, budget.deadlineMs, () => {
      throw requestTimeout(budget.deadlineMs / 1000)
    })
  } finally {
    budget.give(reserved, address)
  }
}

async function readChunks(request: Request, maxBytes: number): Promise<Uint8Array> {
  if (!request.body) return new Uint8Array(0)
  const chunks: Uint8Array[] = []
  let total = 0
  for await (const chunk of request.body as unknown as AsyncIterable<Uint8Array>) {
    total += chunk.byteLength
    // The rest of the body is left unread, so the connection closes with the answer.
    if (total > maxBytes) throw payloadTooLarge(maxBytes, { connection: 'close' })
    chunks.push(chunk)
  }
  return Buffer.concat(chunks, total)
}

/**
 * The first member name repeated in one object, or null: JSON.parse silently keeps the last. Runs only on
 * text JSON.parse accepted, so it tells strings, keys and nesting apart, nothing more.
 */
export function duplicateKey(text: string): string | null {
  const frames: { keys: Set<string> | null; expectKey: boolean }[] = []
  for (let i = 0; i < text.length; i++) {
    const char = text.charCodeAt(i)
    if (char === 0x7b /* { */) frames.push({ keys: new Set(), expectKey: true })
    else if (char === 0x5b /* [ */) frames.push({ keys: null, expectKey: false })
    else if (char === 0x7d /* } */ || char === 0x5d /* ] */) frames.pop()
    else if (char === 0x2c /* , */) {
      const top = frames[frames.length - 1]
      if (top?.keys) top.expectKey = true
    } else if (char === 0x22 /* " */) {
      let end = i + 1
      while (text.charCodeAt(end) !== 0x22) end += text.charCodeAt(end) === 0x5c /* \ */ ? 2 : 1
      const top = frames[frames.length - 1]
      if (top?.keys && top.expectKey) {
        const key = JSON.parse(text.slice(i, end + 1)) as string
        if (top.keys.has(key)) return key
        top.keys.add(key)
        top.expectKey = false
      }
      i = end
    }
  }
  return null
}

/** `address` is the client's, for a budget with a share per address. */
export async function readJsonBody(
  request: Request,
  maxBytes: number,
  budget: BodyBudget = API_BODIES,
  address?: string,
): Promise<unknown> {
  const contentType = request.headers.get('content-type')
  if (contentType?.split(';', 1)[0]?.trim().toLowerCase() !== JSON_TYPE) {
    if (contentType === null && request.headers.get('content-length') === '0') throw badRequest('body: is required (a JSON object)')
    throw unsupportedMediaType()
  }
  // Bun hands the body over as sent: a compressed one would be read as if it were the JSON itself.
  const coding = request.headers.get('content-encoding')
  // HTTP's own white space only: String.trim would also take a no-break space for it.
  if (coding !== null && !/^[ \t]*identity[ \t]*$/i.test(coding)) throw unsupportedContentCoding()
  let bytes: Uint8Array
  try {
    bytes = await readCapped(request, maxBytes, budget, address)
  } catch (error) {
    // The client went away before its body arrived: its own doing, not the server's.
    if (!(error instanceof ApiError) && request.signal.aborted) throw new ClientClosedError()
    throw error
  }
  if (bytes.byteLength === 0) throw badRequest('body: is required (a JSON object)')
  let text: string
  try {
    text = decoder.decode(bytes)
  } catch {
    throw badRequest('body: is not valid UTF-8')
  }
  let value: unknown
  try {
    value = JSON.parse(text, strictValues as (key: string, value: unknown) => unknown)
  } catch (error) {
    if (error instanceof ApiError) throw error
    // Valid JSON nested past the stack the reviver's walk can take (some thousands of levels).
    if (error instanceof RangeError) throw badRequest('body: is nested too deeply')
    throw badRequest('body: is not valid JSON')
  }
  const repeated = duplicateKey(text)
  if (repeated !== null) throw badRequest(`${repeated.slice(0, 40)}: is given more than once`)
  return value
}
