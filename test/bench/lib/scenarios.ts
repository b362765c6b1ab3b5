/**
 * What the benchmark sends: the yardstick's five scenarios (../shared/bench/yardstick.ts), each described
 * once as a request shape with optional variable parts (a random pet id; a new client address and a new
 * made-up token per request), from which the wrk script is built (load.ts).
 */

export interface RequestShape {
  method: 'GET' | 'POST'
  /** Path and query; `{id}` is replaced by a random pet id when the load has `randomId`. */
  path: string
  headers: Record<string, string>
  body?: string
}

export interface LoadSpec {
  request: RequestShape
  /** Replace `{id}` in the path with a uniformly random id in 1..max. */
  randomId?: { max: number }
  /**
   * A new client per request: `X-Forwarded-For` walks through the /64s of 2001:db8::/32 (the server
   * trusts the loopback proxy) and `Authorization` carries a new made-up secret, shaped as ours with a wrong checksum.
   */
  newClient?: { tokenPrefix: string }
}

export interface BenchContext {
  /** The Enterprise key whose limits are out of reach. */
  key: string
  /** Pets seeded; ids run from 1. */
  pets: number
  /** 39 base62 characters the made-up secrets start with (a counter fills the last 10). */
  tokenPrefix: string
}

export interface Scenario {
  name: string
  /** Markdown label for the table. */
  title: string
  /** Statuses that count as expected; anything else (and any socket error) is reported as unexpected. */
  expected: number[]
  /** The error code the captured answer must carry, when it is a refusal. */
  code?: string
  /** The goal: petstore's requests/s over the bare server's, median of the pair ratios. */
  goal: number
  /** A flood: the server's RSS is read after it. */
  flood?: boolean
  /** The client must be banned before a run (run.ts calls banClient). */
  banned?: boolean
  /** Compared across the two modes (PostgreSQL + Redis CPU per request ÷ embedded). */
  acrossModes: boolean
  describe: string
  load(ctx: BenchContext): LoadSpec
}

/** A token that is no key, sent by the banned client from 127.0.0.1. */
export const BAD_TOKEN = 'nope-nope-nope'

const auth = (token: string) => ({ authorization: `Bearer ${token}` })
export const NEW_PET_BODY = JSON.stringify({ name: 'Bench Rex', categoryId: 4, status: 'pending' })

export const SCENARIOS: Scenario[] = [
  {
    name: 'list',
    title: '`GET /pets?limit=20`',
    expected: [200],
    goal: 0.9,
    acrossModes: true,
    describe: 'first page of 20, valid Enterprise key',
    load: ({ key }) => ({ request: { method: 'GET', path: '/v1/pets?limit=20', headers: auth(key) } }),
  },
  {
    name: 'get',
    title: '`GET /pets/{id}` (random ids)',
    expected: [200],
    goal: 0.8,
    acrossModes: true,
    describe: 'a uniformly random id among the seeded pets per request',
    load: ({ key, pets }) => ({ request: { method: 'GET', path: '/v1/pets/{id}', headers: auth(key) }, randomId: { max: pets } }),
  },
  {
    name: 'create',
    title: '`POST /pets` (durable 201)',
    // 499: creates in flight when wrk hangs up at the end of a run (logged as such).
    expected: [201, 499],
    goal: 0.4,
    acrossModes: false,
    describe: 'a new pet per request; every 201 is checked against the rows after a SIGKILL',
    load: ({ key }) => ({
      request: { method: 'POST', path: '/v1/pets', headers: { ...auth(key), 'content-type': 'application/json' }, body: NEW_PET_BODY },
    }),
  },
  {
    name: 'banned',
    title: 'one address, bad token: banned',
    expected: [429],
    code: 'address_banned',
    goal: 0.85,
    flood: true,
    banned: true,
    acrossModes: true,
    describe:
      'one address (127.0.0.1) flooding with a token that is no key: limited after its 60, then banned; measures the banned refusal',
    load: () => ({ request: { method: 'GET', path: '/v1/pets?limit=20', headers: auth(BAD_TOKEN) } }),
  },
  {
    name: 'made-up',
    title: 'made-up tokens, new addresses',
    expected: [401],
    code: 'unauthorized',
    goal: 0.7,
    flood: true,
    acrossModes: true,
    describe: 'a new made-up psk_ token per request, each from a new X-Forwarded-For in 2001:db8::/32 (--trust-proxy loopback)',
    load: ({ tokenPrefix }) => ({
      request: { method: 'GET', path: '/v1/pets?limit=20', headers: {} },
      newClient: { tokenPrefix },
    }),
  },
]

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** 39 random base62 characters: with a 10-digit counter, a secret of our shape (psk_ + 49). */
export function randomTokenPrefix(): string {
  let out = ''
  for (let i = 0; i < 39; i++) out += BASE62[Math.floor(Math.random() * 62)]
  return out
}

/**
 * Client number `i`'s address and made-up secret, as the wrk script makes them: each client in a /64 of
 * its own (the limiter counts IPv6 clients per /64), 2^32 of them before one comes back.
 */
export function newClientOf(tokenPrefix: string, i: number): { address: string; token: string } {
  const hex = (n: number) => n.toString(16)
  return {
    address: `2001:db8:${hex(i % 65536)}:${hex(Math.floor(i / 65536) % 65536)}::1`,
    token: `psk_${tokenPrefix}${String(i % 1e10).padStart(10, '0')}`,
  }
}

/** The concrete request used to capture the server's answer for the baseline. */
export function concrete(spec: LoadSpec, id: number, client: number): RequestShape {
  const headers = { ...spec.request.headers }
  if (spec.newClient) {
    const { address, token } = newClientOf(spec.newClient.tokenPrefix, client)
    headers['x-forwarded-for'] = address
    headers.authorization = `Bearer ${token}`
  }
  return { ...spec.request, path: spec.request.path.replace('{id}', String(id)), headers }
}

/**
 * Floods `origin` from this address with BAD_TOKEN until the answer is `address_banned`: the Free plan's
 * 60 a minute, then 429s until the ban (--ban-after, default 50). Returns the requests it took.
 */
export async function banClient(origin: string, limit = 2_000): Promise<number> {
  for (let sent = 1; sent <= limit; sent++) {
    const res = await fetch(`${origin}/v1/pets?limit=20`, { headers: auth(BAD_TOKEN) })
    const body = await res.text()
    if (res.status === 429 && body.includes('"address_banned"')) return sent
  }
  throw new Error(`${origin}: no address_banned after ${limit} requests with a bad token`)
}
