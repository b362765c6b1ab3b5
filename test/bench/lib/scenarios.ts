/**
 * What the benchmark sends. A scenario is described once, independent of the load generator: a request
 * shape with optional variable parts (a random pet id, a client address from a pool or unique per
 * request, every Nth request a write). The wrk script and the autocannon runner are both built from it.
 */

export interface RequestShape {
  method: 'GET' | 'POST'
  /** Path and query; `{id}` is replaced by a random pet id when the load has `randomId`. */
  path: string
  headers: Record<string, string>
  body?: string
}

export interface LoadSpec {
  /** The request sent (every request, or the reads of a mix). */
  read: RequestShape
  /** A mix: every `every`th request is this one instead. */
  write?: { every: number; request: RequestShape }
  /** Replace `{id}` in the read path with a uniformly random id in 1..max. */
  randomId?: { max: number }
  /**
   * Add X-Forwarded-For: 'pool' picks a random address among `size` (172.16.0.0/12), 'unique' walks
   * through `size` distinct addresses (10.0.0.0/8) so consecutive requests never share one.
   */
  forwardedFor?: { mode: 'pool' | 'unique'; size: number }
}

export interface BenchContext {
  /** The Enterprise key whose limits are out of reach. */
  key: string
  /** An Enterprise key with 1 request per minute and per day, already used once. */
  exhaustedKey: string
  /** Path and query of a page reached through a Link: rel="next". */
  cursorPath: string
  pets: number
}

export type GoalKind = 'read' | 'refusal' | 'write' | 'mix'

export interface Scenario {
  name: string
  /** Markdown label for the table. */
  title: string
  /** Statuses that count as expected; anything else (and any socket error) is reported as unexpected. */
  expected: number[]
  goal: { kind: GoalKind; ratio: number }
  /** Reads are held to the p99 goal. */
  p99GoalMs?: number
  describe: string
  load(ctx: BenchContext): LoadSpec
}

export const READ_P99_GOAL_MS = 10
export const BAD_KEY = 'psk_this-key-does-not-exist-0000000000000000000000'
export const SPRAY_ADDRESSES = 200_000
/** Addresses the 401 scenario rotates through: enough that none reaches the Free limit of 60/min. */
export const REFUSAL_POOL = 50_000

const auth = (key: string) => ({ authorization: `Bearer ${key}` })
export const NEW_PET_BODY = JSON.stringify({ name: 'Bench Rex', categoryId: 7, status: 'available' })
const createRequest = (key: string): RequestShape => ({
  method: 'POST',
  path: '/v1/pets',
  headers: { ...auth(key), 'content-type': 'application/json' },
  body: NEW_PET_BODY,
})

export const SCENARIOS: Scenario[] = [
  {
    name: 'list-20',
    title: '`GET /pets?limit=20`',
    expected: [200],
    goal: { kind: 'read', ratio: 0.8 },
    p99GoalMs: READ_P99_GOAL_MS,
    describe: 'first page of 20, valid Enterprise key',
    load: ({ key }) => ({ read: { method: 'GET', path: '/v1/pets?limit=20', headers: auth(key) } }),
  },
  {
    name: 'list-sold-100',
    title: '`GET /pets?status=sold&limit=100`',
    expected: [200],
    goal: { kind: 'read', ratio: 0.6 },
    p99GoalMs: READ_P99_GOAL_MS,
    describe: 'first page of 100 sold pets',
    load: ({ key }) => ({ read: { method: 'GET', path: '/v1/pets?status=sold&limit=100', headers: auth(key) } }),
  },
  {
    name: 'cursor-page',
    title: 'cursor page (`GET /pets?limit=20&cursor=…`)',
    expected: [200],
    goal: { kind: 'read', ratio: 0.6 },
    p99GoalMs: READ_P99_GOAL_MS,
    describe: 'second page, URL taken from the first page’s Link: rel="next"',
    load: ({ key, cursorPath }) => ({ read: { method: 'GET', path: cursorPath, headers: auth(key) } }),
  },
  {
    name: 'get-by-id',
    title: '`GET /pets/{id}` (random ids)',
    expected: [200],
    goal: { kind: 'read', ratio: 0.7 },
    p99GoalMs: READ_P99_GOAL_MS,
    describe: 'a uniformly random id among the seeded pets per request',
    load: ({ key, pets }) => ({
      read: { method: 'GET', path: '/v1/pets/{id}', headers: auth(key) },
      randomId: { max: pets },
    }),
  },
  {
    name: 'create',
    title: '`POST /pets` (durable 201)',
    // 499: creates in flight when the load generator hangs up at the end of a run (logged as such).
    expected: [201, 499],
    goal: { kind: 'write', ratio: 0.35 },
    describe: 'a new pet per request; every 201 is checked against the rows after a SIGKILL',
    load: ({ key }) => ({ read: createRequest(key) }),
  },
  {
    name: 'mix-90-10',
    title: '90/10 mix (`GET /pets?limit=20` / `POST /pets`)',
    expected: [200, 201, 499],
    goal: { kind: 'mix', ratio: 0.5 },
    p99GoalMs: READ_P99_GOAL_MS,
    describe: 'nine list reads, then one create, repeated',
    load: ({ key }) => ({
      read: { method: 'GET', path: '/v1/pets?limit=20', headers: auth(key) },
      write: { every: 10, request: createRequest(key) },
    }),
  },
  {
    name: 'unauthorized',
    title: '401 (bad key)',
    expected: [401],
    goal: { kind: 'refusal', ratio: 0.7 },
    describe: `unknown key, X-Forwarded-For from a pool of ${REFUSAL_POOL.toLocaleString('en')} addresses (none reaches the Free plan's 60/min)`,
    load: () => ({
      read: { method: 'GET', path: '/v1/pets?limit=20', headers: auth(BAD_KEY) },
      forwardedFor: { mode: 'pool', size: REFUSAL_POOL },
    }),
  },
  {
    name: 'rate-limited',
    title: '429 `rate_limited` (exhausted key)',
    expected: [429],
    goal: { kind: 'refusal', ratio: 0.7 },
    describe:
      'Enterprise key with 1/min and 1/day, used once; server runs with --ban-after 100000 --ban-seconds 0 so it stays rate_limited, never key_banned',
    load: ({ exhaustedKey }) => ({ read: { method: 'GET', path: '/v1/pets?limit=20', headers: auth(exhaustedKey) } }),
  },
  {
    name: 'spray',
    title: `401 spray, ${SPRAY_ADDRESSES.toLocaleString('en')} addresses`,
    expected: [401],
    goal: { kind: 'refusal', ratio: 0.7 },
    describe: `unknown key, a new X-Forwarded-For address per request, cycling through ${SPRAY_ADDRESSES.toLocaleString('en')} (--trust-proxy); runs last, for the RSS after the spray`,
    load: () => ({
      read: { method: 'GET', path: '/v1/pets?limit=20', headers: auth(BAD_KEY) },
      forwardedFor: { mode: 'unique', size: SPRAY_ADDRESSES },
    }),
  },
]

/** The address of index `i` in a pool (172.16.0.0/12) or the spray (10.0.0.0/8). */
export function addressOf(mode: 'pool' | 'unique', i: number): string {
  const first = mode === 'pool' ? 172 : 10
  const second = (mode === 'pool' ? 16 : 0) + (Math.floor(i / 65536) % 256)
  return `${first}.${second}.${Math.floor(i / 256) % 256}.${i % 256}`
}

/** The concrete request used to capture the server's answer for the baseline. */
export function concrete(shape: RequestShape, spec: LoadSpec, captureAddress: string, id: number): RequestShape {
  const headers = { ...shape.headers }
  if (spec.forwardedFor && shape === spec.read) headers['x-forwarded-for'] = captureAddress
  return { ...shape, path: shape.path.replace('{id}', String(id)), headers }
}
