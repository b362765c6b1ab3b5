/**
 * The console's app: its page, and the JSON API the page uses (with its OpenAPI document), on a listener
 * of its own, never the API's. The page (page/: HTML, a TypeScript module and a stylesheet) holds no
 * data and is served to anyone, so that they can sign in; everything it shows comes from the API.
 * Every answer carries a Content-Security-Policy without inline script and refuses framing. Every route
 * but sign-in needs an operator: a browser session (an HttpOnly, SameSite=Strict cookie) or a script's
 * token (Authorization: Bearer). With the cookie, a request that changes something must also come from
 * the console's own origin (its `Origin` header), so no other site can make a signed-in browser act.
 */
import { Elysia } from 'elysia'
import type { HTMLBundle, Server } from 'bun'
import { basename } from 'node:path'
import { badRequest, forbidden, notFound } from '../../http/api-errors'
import { compressedAsset, noFavicon } from '../../http/assets'
import { bearerToken } from '../../http/bearer-token'
import { addressSubject, normaliseAddress, type TrustedProxies } from '../../http/client-address'
import { readJsonBody } from '../../http/json-body'
import type { AnyElysia } from '../../http/openapi'
import { RouteTable } from '../../http/routes'
import { compileValidator } from '../../http/validation'
import type { Credential } from '../../domain/operators'
import { errorHandler } from '../../plugins/error-answers'
import type { RecentRequests } from '../../observability/recent-requests'
import { DEPRECATED_OPERATION, SUNSET } from '../pets'
import { type Window, WINDOWS } from '../usage/service'
import { consoleDocument } from './document'
import { FIELD_RULES, NewKey, PlanChange, SignIn } from './model'
import page from './page/index.html'
import { ConsoleService, type ConsoleServiceDeps, SESSION_IDLE_MS } from './service'

export interface ConsoleOptions extends ConsoleServiceDeps {
  recent: RecentRequests
  /** Proxies whose X-Forwarded-Proto and X-Forwarded-Host are believed (the API's --trust-proxy). */
  trustProxy: TrustedProxies
  version: string
  onInternalError: (error: unknown) => void
}

export const SESSION_COOKIE = 'petstore_console'
const MAX_BODY_BYTES = 8 * 1024
const LIST_DEFAULT = 200
const LIST_MAX = 5_000

/** On every answer of the console listener. */
export const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
}

const signInValidator = compileValidator(SignIn, FIELD_RULES)
const newKeyValidator = compileValidator(NewKey, FIELD_RULES)
const planValidator = compileValidator(PlanChange, FIELD_RULES)
const SAFE_METHODS = new Set(['GET', 'HEAD'])
/** The deprecated operation's sunset, from the same text the API's Sunset header sends. */
const SUNSET_MS = Date.parse(SUNSET)
/** A key's refusals shown in its view: 429s, and 401s the buffer attributes to it. */
const REFUSALS = [429, 401]
const REFUSALS_SHOWN = 100

type Context = { request: Request; server: Server<unknown> | null; set: { status?: number | string; headers: Record<string, unknown> } }

export function consoleModule(options: ConsoleOptions): AnyElysia {
  const service = new ConsoleService(options)
  const routes = new RouteTable()

  /** Whether the request came through a trusted proxy, which then says the scheme and host the browser used. */
  const viaProxy = ({ request, server }: Context) => {
    const peer = server?.requestIP(request)?.address
    const normal = peer && normaliseAddress(peer)
    return normal ? options.trustProxy.has(normal) : false
  }
  const forwarded = (request: Request, name: string) => request.headers.get(name)?.split(',')[0]!.trim() || null
  const isHttps = (context: Context) => viaProxy(context) && forwarded(context.request, 'x-forwarded-proto') === 'https'

  /** A request that changes something with the session cookie must come from this console's page. */
  const checkOrigin = (context: Context) => {
    const { request } = context
    const host = (viaProxy(context) && forwarded(request, 'x-forwarded-host')) || request.headers.get('host')
    const expected = `${isHttps(context) ? 'https' : 'http'}://${host}`.toLowerCase()
    if (request.headers.get('origin')?.toLowerCase() !== expected)
      throw forbidden('A request that changes something must come from this console\'s own page (its Origin).')
  }

  /** The operator behind the request: a token for scripts, else the session cookie. */
  const operator = async (context: Context): Promise<Credential & { secret: string }> => {
    const token = bearerToken(context.request.headers.get('authorization'))
    if (token !== undefined) return { ...(await service.authenticate(token, 'token')), secret: token }
    const secret = cookie(context.request.headers.get('cookie'), SESSION_COOKIE)
    const credential = await service.authenticate(secret, 'session')
    if (!SAFE_METHODS.has(context.request.method)) checkOrigin(context)
    return { ...credential, secret: secret! }
  }

  const done = (set: Context['set']) => {
    set.status = 204
    return ''
  }

  let assets: Promise<Map<string, (request: Request) => Promise<Response>>> | undefined
  const asset = async (path: string, request: Request) => {
    const found = (await (assets ??= pageAssets(page))).get(path)
    if (!found) throw notFound(`No resource at ${path.slice(0, 200)}.`)
    return found(request)
  }

  /** Recent answers as the API gives them: ISO times, the key's name beside its id. */
  const recentRows = async (filter: Parameters<RecentRequests['list']>[0]) => {
    const requests = options.recent.list(filter)
    const names = new Map((await options.storage.keys.list()).map((key) => [key.id, key.name]))
    return requests.map((entry) => ({ ...entry, time: new Date(entry.time).toISOString(), keyName: entry.keyId ? (names.get(entry.keyId) ?? null) : null }))
  }

  const app = new Elysia({ name: 'console' })
    .use(errorHandler({ allowedMethods: (path) => routes.allowed(path), onInternalError: options.onInternalError }))
    .onRequest(({ set }) => {
      set.headers = { ...SECURITY_HEADERS }
    })
    .get('/', ({ request }) => asset('/', request))
    .get('/favicon.ico', noFavicon)
    .get('/:file', ({ params, request }) => asset(`/${params.file}`, request))
    .post(
      '/api/session',
      async (context) => {
        checkOrigin(context)
        const input = signInValidator.parse(await readJsonBody(context.request, MAX_BODY_BYTES))
        const { secret, operator: name } = await service.signIn(input.name, input.password)
        context.set.headers['set-cookie'] =
          `${SESSION_COOKIE}=${secret}; Path=/; HttpOnly; SameSite=Strict${isHttps(context) ? '; Secure' : ''}`
        return { name, via: 'session', idleMinutes: SESSION_IDLE_MS / 60_000 }
      },
      { parse: 'none' },
    )
    .delete('/api/session', async (context) => {
      const who = await operator(context)
      if (who.kind === 'session') await service.signOut(who.operator, who.secret)
      context.set.headers['set-cookie'] = `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`
      return done(context.set)
    })
    .get('/api/me', async (context) => {
      const who = await operator(context)
      return { name: who.operator, via: who.kind }
    })
    .get('/api/openapi.json', async (context) => {
      await operator(context)
      return consoleDocument(options.version)
    })
    .get('/api/keys', async (context) => {
      await operator(context)
      return service.listKeys()
    })
    .post(
      '/api/keys',
      async (context) => {
        const who = await operator(context)
        const input = newKeyValidator.parse(await readJsonBody(context.request, MAX_BODY_BYTES))
        const created = await service.createKey(who.operator, input)
        context.set.status = 201
        return created
      },
      { parse: 'none' },
    )
    .delete('/api/keys/:id', async (context) => {
      const who = await operator(context)
      await service.revokeKey(who.operator, context.params.id)
      return done(context.set)
    })
    .post(
      '/api/keys/:id/reset-limits',
      async (context) => {
        const who = await operator(context)
        await service.resetLimits(who.operator, context.params.id)
        return done(context.set)
      },
      { parse: 'none' },
    )
    .put(
      '/api/keys/:id/plan',
      async (context) => {
        const who = await operator(context)
        const input = planValidator.parse(await readJsonBody(context.request, MAX_BODY_BYTES))
        await service.setPlan(who.operator, context.params.id, input)
        return done(context.set)
      },
      { parse: 'none' },
    )
    .get('/api/bans', async (context) => {
      await operator(context)
      return service.bans()
    })
    .delete('/api/bans/keys/:id', async (context) => {
      const who = await operator(context)
      await service.liftKeyBan(who.operator, context.params.id)
      return done(context.set)
    })
    .delete('/api/bans/addresses/:address', async (context) => {
      const who = await operator(context)
      await service.liftAddressBan(who.operator, addressSubjectOf(context.params.address))
      return done(context.set)
    })
    .get('/api/requests', async (context) => {
      await operator(context)
      const query = new URL(context.request.url).searchParams
      const status = query.has('status') ? integerParameter(query, 'status', 100, 599) : undefined
      const keyId = query.get('key') ?? undefined
      return { requests: await recentRows({ keyId, status, limit: limitOf(query) }) }
    })
    .get('/api/overview', async (context) => {
      await operator(context)
      return service.overview()
    })
    .get('/api/keys/:id/usage', async (context) => {
      await operator(context)
      const { id } = context.params
      const usage = await service.keyUsage(id, windowOf(new URL(context.request.url).searchParams))
      const refusals = (await Promise.all(REFUSALS.map((status) => recentRows({ keyId: id, status, limit: REFUSALS_SHOWN }))))
        .flat()
        .sort((a, b) => b.time.localeCompare(a.time))
        .slice(0, REFUSALS_SHOWN)
      return { ...usage, refusals }
    })
    .get('/api/deprecation', async (context) => {
      await operator(context)
      return { operation: DEPRECATED_OPERATION, method: 'GET', path: '/pets/{petId}', ...(await service.deprecation(SUNSET_MS)) }
    })
    .get('/api/audit', async (context) => {
      await operator(context)
      return { entries: await service.auditLog(limitOf(new URL(context.request.url).searchParams)) }
    })
  routes.read(app.routes)
  return app
}

/**
 * The page's files by path, each an answer with the console's security headers. In the binary, `bun
 * build --compile` has bundled the page (HTML, script, stylesheet) into files of its own; from source,
 * the page is bundled here, once, in memory.
 */
async function pageAssets(bundle: HTMLBundle): Promise<Map<string, (request: Request) => Promise<Response>>> {
  const files: { path: string; type: string; body: Blob }[] = []
  const compiled = (bundle as HTMLBundle & { files?: { path: string; loader: string; headers: Record<string, string> }[] }).files
  if (compiled) {
    for (const file of compiled)
      files.push({ path: file.loader === 'html' ? '/' : `/${basename(file.path)}`, type: file.headers['content-type']!, body: Bun.file(file.path) })
  } else {
    const built = await Bun.build({ entrypoints: [bundle.index], target: 'browser', minify: true })
    if (!built.success) throw new Error(`the console's page does not build: ${built.logs.join('; ')}`)
    for (const output of built.outputs)
      files.push({ path: output.path.endsWith('.html') ? '/' : `/${basename(output.path)}`, type: output.type, body: output })
  }
  const answers = new Map<string, (request: Request) => Promise<Response>>()
  for (const file of files) answers.set(file.path, compressedAsset(() => file.body.arrayBuffer(), { ...SECURITY_HEADERS, 'content-type': file.type }))
  return answers
}

/** A cookie's value from a Cookie header; undefined when it is not there. */
function cookie(header: string | null, name: string): string | undefined {
  if (!header) return undefined
  for (const part of header.split(';')) {
    const [key, ...value] = part.trim().split('=')
    if (key === name) return value.join('=') || undefined
  }
  return undefined
}

function integerParameter(query: URLSearchParams, name: string, min: number, max: number): number {
  const text = query.get(name)!
  if (!/^\d{1,10}$/.test(text) || Number(text) < min || Number(text) > max) throw badRequest(`${name}: must be an integer from ${min} to ${max}`)
  return Number(text)
}

function windowOf(query: URLSearchParams): Window {
  const window = query.get('window') ?? 'day'
  if (!Object.hasOwn(WINDOWS, window)) throw badRequest(`window: must be one of ${Object.keys(WINDOWS).join(', ')}`)
  return window as Window
}

function limitOf(query: URLSearchParams): number {
  return query.has('limit') ? integerParameter(query, 'limit', 1, LIST_MAX) : LIST_DEFAULT
}

/** The limiter's subject for an address as the ban list gives it (an IPv6 client's /64 included). */
function addressSubjectOf(text: string): string {
  const [address, prefix] = text.split('/')
  const normal = normaliseAddress(address ?? '')
  if (!normal || (prefix !== undefined && !(normal.includes(':') && prefix === '64')))
    throw badRequest('address: must be an IPv4 address, or an IPv6 address (or its /64) as the ban list gives it')
  return addressSubject(normal)
}
