/**
 * The console's app: its page, and the JSON API the page uses, on a listener of its own, never the
 * API's. Each route carries its own OpenAPI detail, from which document.ts makes the document. The page
 * (page/) holds no data and is served to anyone, so that they can sign in; everything it shows comes
 * from the API. Every answer carries a Content-Security-Policy without inline script and refuses framing.
 *
 * Before routing and before any body is read, onRequest refuses a `Host` (or a trusted proxy's
 * X-Forwarded-Host) that is not one of the console's names with 421 (DNS rebinding), and a declared body
 * over 8 KiB with 413. No route lets Elysia parse a body (`parse: 'none'`). After the page's files and
 * sign-in, the guard resolves the operator of every route that follows, one added later included, still
 * before any body is read: a session cookie (HttpOnly, SameSite=Strict) or a script's token
 * (Authorization: Bearer), else 401; then the query, as strictly as the API's, else 400. With the cookie,
 * a change must also come from the console's own `Origin`. Bodies are read by the bounded reader, and a
 * body left unread closes its connection.
 *
 * What it reads of a request before routing is controller/request-reading.ts; the page's files and the
 * security headers controller/page-assets.ts; query and path parameters controller/parameters.ts;
 * the session cookie cookies.ts.
 */
import { Elysia } from 'elysia'
import type { Server } from 'bun'
import { ApiError, notFound, unavailable } from '../../http/api-errors'
import { noFavicon } from '../../http/assets'
import { bearerToken } from '../../http/bearer-token'
import type { TrustedProxies } from '../../http/client-address'
import { BodyBudget, bodyUnread, readJsonBody } from '../../http/json-body'
import type { AnyElysia } from '../../http/openapi'
import { strictQuery } from '../../http/query'
import { type RouteInfo, RouteTable } from '../../http/routes'
import { compileValidator } from '../../http/validation'
import { KEY_ID } from '../../domain/api-key'
import { OPERATOR_NAME_RULE } from '../../domain/operator-name'
import { type Credential, SESSION_IDLE_MS } from '../../domain/operators'
import type { AddressSubject } from '../../domain/subject'
import { MINUTE_MS } from '../../domain/time'
import { errorHandler } from '../../plugins/error-answers'
import type { RecentRequests } from '../../observability/recent-requests'
import { consoleDocument, done, HEADERS, json, operation, THIS_DOCUMENT, UNDOCUMENTED } from './document'
import {
  AddressParams,
  AuditQuery,
  FIELD_RULES,
  KeyParams,
  KeysQuery,
  MAX_BODY_BYTES,
  type Model,
  NewKey,
  PlanChange,
  Roll,
  ExpiryChange,
  RequestsQuery,
  RevokedKeys,
  SignIn,
  UsageQuery,
  UsageWindow,
} from './model'
import page from './page/index.html'
import { ConsoleService, type ConsoleServiceDeps } from './service'
import { SECURITY_HEADERS, pageAssets } from './controller/page-assets'
import { addressSubjectOf, choiceOf, integerParameter, keyPageOf, limitOf } from './controller/parameters'
import { requestReading } from './controller/request-reading'
import { sessionCookie, sessionCookies } from './cookies'

/**
 * The API's limits for requests without a valid key (server/server.ts wires them): the Free plan's per
 * client address. While the limiter does not answer they refuse nothing: the console stays open to
 * operators while Redis is away.
 */
export interface KeylessLimits {
  /** Whether the address's next request would be refused; nothing is taken. */
  refuses(subject: AddressSubject): Promise<boolean>
  /** Takes one request from the address's bucket: the refusal to give when refused, else undefined. */
  take(subject: AddressSubject): Promise<ApiError | undefined>
}

export interface ConsoleOptions extends ConsoleServiceDeps {
  /** The API's limits for requests without a valid key: the console's without a valid credential share them. */
  keyless: KeylessLimits
  recent: RecentRequests
  /** Proxies whose X-Forwarded-Proto and X-Forwarded-Host are believed (the API's --trust-proxy). */
  trustProxy: TrustedProxies
  /** Where the console listens; a port of 0 is read from the listener once it is bound. */
  address: { host: string; port: number }
  /** Host names it answers to besides its address (--console-host), for a proxy in front. */
  hosts: readonly string[]
  version: string
  onInternalError: (error: unknown) => void
  /** Notes a failure that says the data file is damaged, and answers true; the answer is then 503. */
  damaged?: (error: unknown) => boolean
  /** Why the data file may no longer be written (replaced or damaged: readiness.ts), or null. */
  storageFault?: () => string | null
}

const signInValidator = compileValidator(SignIn, { ...FIELD_RULES, name: OPERATOR_NAME_RULE })
const newKeyValidator = compileValidator(NewKey, FIELD_RULES)
const planValidator = compileValidator(PlanChange, FIELD_RULES)
const rollValidator = compileValidator(Roll, FIELD_RULES)
const expiryValidator = compileValidator(ExpiryChange, FIELD_RULES)
const SAFE_METHODS = new Set(['GET', 'HEAD'])
/** A key's refusals shown in its view: 429s, and 401s the buffer attributes to it. */
const REFUSALS = [429, 401]
const REFUSALS_SHOWN = 100
/** The operator behind a request, as the guard found it. */
type Who = Credential & { secret: string }
/** What a handler that answers 204 is given (noContent). */
type Context = {
  who: Who
  params: Record<string, string>
  request: Request
  set: { status?: number | string; headers: Record<string, unknown> }
}

const NO_SUCH_KEY = notFound('No key with this id: a key id is key_ followed by letters, digits, - and _.')

/** Console bodies of 8 KiB received at once, per budget (1 MiB). */
const BODIES_IN_FLIGHT = 128
/** A sign-in's body at most: a real one (a name of up to 64 characters, a generated password) is under 200 bytes. */
const SIGN_IN_MAX_BYTES = 1024
/** Sign-in bodies received at once (128 KiB), and from one client address (4 KiB). */
const SIGN_IN_BODIES = 128
const SIGN_IN_BODIES_PER_ADDRESS = 4
/** How long a sign-in's body may take: a browser sends its few bytes with the headers. */
const SIGN_IN_DEADLINE_MS = 2_000

export function consoleModule(options: ConsoleOptions): AnyElysia {
  const service = new ConsoleService(options)
  // Bodies half-sent to this listener hold budgets of its own, never the API's: sign-in's (anyone may
  // send one) apart from the operators', so a flood of the first cannot stop keys being made.
  // One address may hold a few sign-ins' bytes, so that a client stalling bodies cannot lock operators out.
  const signInBodies = new BodyBudget(SIGN_IN_BODIES * SIGN_IN_MAX_BYTES, {
    perAddress: SIGN_IN_BODIES_PER_ADDRESS * SIGN_IN_MAX_BYTES,
    deadlineMs: SIGN_IN_DEADLINE_MS,
  })
  const operatorBodies = new BodyBudget(BODIES_IN_FLIGHT * MAX_BODY_BYTES)
  const routes = new RouteTable()
  const server = (): Server<unknown> | null => app.server

  const { clientOf, isHttps, checkOrigin, admit } = requestReading(options, server)

  /**
   * The session of the cookie. Several cookies of that name can arrive (a sibling site's or another
   * path's beside ours, listed first by the browser): the first that is a live session is the one.
   */
  const session = async (request: Request): Promise<Who> => {
    for (const secret of sessionCookies(request.headers.get('cookie'))) {
      try {
        return { ...(await service.authenticate(secret, 'session')), secret }
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 401)) throw error
      }
    }
    // No live one: the service's own 401.
    return { ...(await service.authenticate(undefined, 'session')), secret: '' }
  }

  /** The operator behind the request: a token for scripts, else the session cookie. */
  const operator = async (request: Request): Promise<Who> => {
    const token = bearerToken(request.headers.get('authorization'))
    const subject = clientOf(request)
    // Storage is asked about a secret it has not refused before only while the client's address has
    // requests left, unless the secret was found live here before: made-up secrets cost each address the
    // API's keyless limit, not a read per request, and an operator behind a banned address (the proxy's,
    // this machine's) can still lift the ban.
    const secrets = token !== undefined ? [token] : sessionCookies(request.headers.get('cookie'))
    const kind = token !== undefined ? 'token' : 'session'
    const wasLive = secrets.some((secret) => service.knownLive(secret, kind))
    const asks = secrets.some((secret) => !service.knownMiss(secret, kind)) && !wasLive
    // Refused by the peek, the request is refused by its take (which counts toward a ban), unless a token came back meanwhile.
    const taken = asks && (await options.keyless.refuses(subject))
    if (taken) await keyless(subject)
    try {
      if (token !== undefined) return { ...(await service.authenticate(token, 'token')), secret: token }
      const credential = await session(request)
      if (!SAFE_METHODS.has(request.method)) checkOrigin(request)
      return credential
    } catch (error) {
      // A secret found live here before and ended since (a password reset, a sign-out) is no guess: its
      // 401 costs the address nothing, once (it is a known miss from now on).
      if (error instanceof ApiError && error.status === 401 && !taken && !wasLive) await keyless(subject)
      throw error
    }
  }

  /** A request without a valid credential takes from its address's bucket, as the API's do; refused, a 429 (or the ban's). */
  const keyless = async (subject: AddressSubject): Promise<void> => {
    const refused = await options.keyless.take(subject)
    if (refused) throw refused
  }

  /** Each route's query parameters, by method and route, as its detail declares them (read once the app exists). */
  const queries = new Map<string, string[]>()

  /** A query as strict as the API's: only the route's declared parameters, each at most once. */
  const checkQuery = (request: Request, route: string) =>
    strictQuery(new URL(request.url).searchParams, queries.get(`${request.method === 'HEAD' ? 'GET' : request.method} ${route}`) ?? [])

  /** A handler that answers 204 once `act` is done. */
  const noContent =
    (act: (context: Context) => Promise<unknown>) =>
    async ({ who, params, request, set }: Context): Promise<string> => {
      await act({ who, params, request, set })
      set.status = 204
      return ''
    }

  /** An operator's body, read within its budget and checked against the route's model. */
  const bodyOf = async <T>(validator: { parse(input: unknown): T }, request: Request): Promise<T> =>
    validator.parse(await readJsonBody(request, MAX_BODY_BYTES, operatorBodies))

  let assets: Promise<Map<string, (request: Request) => Promise<Response>>> | undefined
  const asset = async (path: string, request: Request) => {
    const found = (await (assets ??= pageAssets(page))).get(path)
    if (!found) throw notFound(`No resource at ${path.slice(0, 200)}.`)
    return found(request)
  }

  /** Recent answers as the API gives them: ISO times, the key's name beside its id. */
  const recentRows = async (filter: Parameters<RecentRequests['list']>[0]) => {
    const requests = options.recent.list(filter)
    // One key's rows need its name alone, however many keys there are.
    const keys = filter.keyId
      ? [await options.storage.keys.get(filter.keyId)].filter((key) => key !== null)
      : await options.storage.keys.list()
    const names = new Map(keys.map((key) => [key.id, key.name]))
    return requests.map((entry) => ({
      ...entry,
      time: new Date(entry.time).toISOString(),
      keyName: entry.keyId ? (names.get(entry.keyId) ?? null) : null,
    }))
  }

  /** Whether a request changes what the data file holds (signing out aside, which only ends a session). */
  const changes = (request: Request, route: string) => request.method !== 'GET' && request.method !== 'HEAD' && route !== '/api/session'
  /**
   * The guard: the operator of every route declared after it, found before its body is read; then the
   * query and the key id, checked once: nothing else reaches storage, and no handler sees a parameter it
   * does not declare. A change (sign-out aside) is refused while the data file has a fault, as creates
   * are: it would be acknowledged into a file the restart the fault asks for no longer opens.
   */
  const resolveOperator = async ({ request, params, route }: { request: Request; params: unknown; route: string }) => {
    const who = await operator(request)
    const fault = changes(request, route) ? options.storageFault?.() : null
    if (fault) throw unavailable(`Changes are refused: ${fault}; the server needs a restart on a good data file.`)
    checkQuery(request, route)
    const id = (params as { id?: string } | undefined)?.id
    if (id !== undefined && !KEY_ID.test(id)) throw NO_SUCH_KEY
    return { who }
  }
  const behindGuard = (route: RouteInfo) =>
    ((route.hooks as { beforeHandle?: { fn: unknown }[] }).beforeHandle ?? []).some((hook) => hook.fn === resolveOperator)
  let document: object | undefined

  const app: AnyElysia = new Elysia({ name: 'console' })
    .use(
      errorHandler({ allowedMethods: (path) => routes.allowed(path), onInternalError: options.onInternalError, damaged: options.damaged }),
    )
    .onRequest(({ request, set }) => {
      set.headers = { ...SECURITY_HEADERS }
      admit(request)
    })
    .onAfterHandle(({ request, set }) => {
      if (bodyUnread(request)) set.headers.connection = 'close'
    })
    .guard({ parse: 'none' }, (group) =>
      group
        // Anyone: the page's files, and sign-in.
        .get('/', ({ request }) => asset('/', request), UNDOCUMENTED)
        .get('/favicon.ico', noFavicon, UNDOCUMENTED)
        .get('/:file', ({ params, request }) => asset(`/${params.file}`, request), UNDOCUMENTED)
        .post(
          '/api/session',
          async ({ request, set }): Promise<Model<'Operator'>> => {
            checkOrigin(request)
            const input = signInValidator.parse(await readJsonBody(request, SIGN_IN_MAX_BYTES, signInBodies, clientOf(request).name))
            const { secret, operator: name } = await service.signIn(input.name, input.password, clientOf(request).name)
            set.headers['set-cookie'] = sessionCookie(secret, { secure: isHttps(request) })
            return { name, via: 'session', idleMinutes: SESSION_IDLE_MS / MINUTE_MS }
          },
          operation('signIn', 'session', 'Sign in: sets the session cookie', {
            body: 'SignIn',
            responses: {
              200: json('Signed in.', 'Operator', HEADERS.setCookie),
              401: json('Wrong operator name or password.', 'Error'),
              429: json(
                'Too many failed sign-ins for this name within 15 minutes, whatever the password: 5 from this address, or 50 from all.',
                'Error',
                HEADERS.retryAfter,
              ),
            },
            errors: [400, 403],
          }),
        )
        // Every route from here on, one added later included, needs an operator, found before its body is read.
        .resolve(resolveOperator)
        .delete(
          '/api/session',
          noContent(async ({ who, set }) => {
            if (who.kind === 'session') await service.signOut(who.operator, who.secret)
            set.headers['set-cookie'] = sessionCookie('', { maxAge: 0 })
          }),
          operation('signOut', 'session', 'Sign out: ends this session', { responses: { 204: done('Signed out.', HEADERS.endedCookie) } }),
        )
        .get(
          '/api/me',
          ({ who }): Model<'Operator'> => ({ name: who.operator, via: who.kind }),
          operation('me', 'session', 'Who is signed in', { responses: { 200: json('The operator.', 'Operator') } }),
        )
        .get(
          '/api/openapi.json',
          () => (document ??= consoleDocument(app, options.version, behindGuard)),
          operation('openapi', 'document', 'This document', { responses: { 200: THIS_DOCUMENT } }),
        )
        .get(
          '/api/keys',
          ({ request }) => {
            const query = new URL(request.url).searchParams
            return service.listKeys(choiceOf(query, 'revoked', RevokedKeys) === 'include', keyPageOf(query))
          },
          operation('listKeys', 'keys', 'The keys in use (revoked ones too on request), with their day quota left and ban', {
            query: KeysQuery,
            responses: { 200: json('The keys.', 'KeyList') },
          }),
        )
        .post(
          '/api/keys',
          async ({ who, request, set }) => {
            const created = await service.createKey(who.operator, await bodyOf(newKeyValidator, request))
            set.status = 201
            return created
          },
          operation('createKey', 'keys', 'Create a key; its secret is in this answer only', {
            body: 'NewKey',
            responses: { 201: json('Created.', 'CreatedKey') },
          }),
        )
        .delete(
          '/api/keys/:id',
          noContent(({ who, params }) => service.revokeKey(who.operator, params.id!)),
          operation('revokeKey', 'keys', 'Revoke a key: refused by the API within a second', {
            path: KeyParams,
            responses: { 204: done('Revoked.') },
          }),
        )
        .post(
          '/api/keys/:id/reset-limits',
          noContent(({ who, params }) => service.resetLimits(who.operator, params.id!)),
          operation('resetLimits', 'keys', "Refill a key's buckets and lift its ban, within a second", {
            path: KeyParams,
            responses: { 204: done('Reset.') },
          }),
        )
        .put(
          '/api/keys/:id/plan',
          noContent(async ({ who, params, request }) => service.setPlan(who.operator, params.id!, await bodyOf(planValidator, request))),
          operation('setPlan', 'keys', 'Move a key to another plan (and its limits), within a second', {
            path: KeyParams,
            body: 'PlanChange',
            responses: { 204: done('Moved.') },
          }),
        )
        .post(
          '/api/keys/:id/roll',
          async ({ who, params, request, set }) => {
            const { overlapSeconds } = await bodyOf(rollValidator, request)
            const rolled = await service.rollKey(who.operator, params.id!, overlapSeconds)
            set.status = 201
            return rolled
          },
          operation('rollKey', 'keys', 'Give a key a new secret; the previous one works until the overlap ends', {
            path: KeyParams,
            body: 'Roll',
            responses: { 201: json('Rolled: the new secret, in this answer only.', 'RolledKey') },
          }),
        )
        .put(
          '/api/keys/:id/expiry',
          noContent(async ({ who, params, request }) => {
            const { expiresAt } = await bodyOf(expiryValidator, request)
            await service.setExpiry(who.operator, params.id!, expiresAt)
          }),
          operation('setExpiry', 'keys', 'Set when a key expires (or never), on every instance within a second', {
            path: KeyParams,
            body: 'ExpiryChange',
            responses: { 204: done('Set.') },
          }),
        )
        .get(
          '/api/bans',
          () => service.bans(),
          operation('listBans', 'bans', 'Current bans of keys and client addresses', { responses: { 200: json('The bans.', 'BanList') } }),
        )
        .delete(
          '/api/bans/keys/:id',
          noContent(({ who, params }) => service.liftKeyBan(who.operator, params.id!)),
          operation('liftKeyBan', 'bans', "Lift a key's ban (a limit reset), within a second", {
            path: KeyParams,
            responses: { 204: done('Lifted.') },
          }),
        )
        .delete(
          '/api/bans/addresses/:address',
          noContent(({ who, params }) => service.liftAddressBan(who.operator, addressSubjectOf(params.address!))),
          operation('liftAddressBan', 'bans', "Lift a client address's ban", {
            path: AddressParams,
            responses: { 204: done('Lifted.') },
          }),
        )
        .get(
          '/api/requests',
          async ({ request }): Promise<Model<'RecentRequests'>> => {
            const query = new URL(request.url).searchParams
            const status = integerParameter(query, 'status', RequestsQuery.properties.status)
            const keyId = query.get('key') ?? undefined
            return { requests: await recentRows({ keyId, status, limit: limitOf(query) }) }
          },
          operation('recentRequests', 'log', "The API's recent answers (this instance's), newest first", {
            query: RequestsQuery,
            responses: { 200: json('The requests.', 'RecentRequests') },
          }),
        )
        .get(
          '/api/overview',
          () => service.overview(),
          operation(
            'overview',
            'usage',
            "The fleet's requests per minute (hour, day) and per hour (week) by outcome, p50/p99, active keys today, bans now",
            { responses: { 200: json('The overview.', 'Overview') } },
          ),
        )
        .get(
          '/api/keys/:id/usage',
          async ({ params, request }): Promise<Model<'KeyUsage'>> => {
            const { id } = params
            const usage = await service.keyUsage(id, choiceOf(new URL(request.url).searchParams, 'window', UsageWindow))
            const refusals = (await Promise.all(REFUSALS.map((status) => recentRows({ keyId: id, status, limit: REFUSALS_SHOWN }))))
              .flat()
              .sort((a, b) => b.time.localeCompare(a.time))
              .slice(0, REFUSALS_SHOWN)
            return { ...usage, refusals }
          },
          operation('keyUsage', 'usage', "One key's figures, its requests over a window by outcome, and its recent refusals", {
            path: KeyParams,
            query: UsageQuery,
            responses: { 200: json("The key's usage.", 'KeyUsage') },
          }),
        )
        .get(
          '/api/deprecation',
          () => service.deprecation(),
          operation(
            'deprecation',
            'usage',
            'Who still calls the deprecated getPet (GET /pets/{petId}), and the days left until its sunset',
            { responses: { 200: json('The callers.', 'Deprecation') } },
          ),
        )
        .get(
          '/api/audit',
          async ({ request }): Promise<Model<'AuditLog'>> => ({
            entries: await service.auditLog(limitOf(new URL(request.url).searchParams)),
          }),
          operation('auditLog', 'log', 'The audit log, newest first', {
            query: AuditQuery,
            responses: { 200: json('The entries.', 'AuditLog') },
          }),
        ),
    )
  routes.read(app.routes)
  for (const route of app.routes as RouteInfo[]) {
    const parameters = (route.hooks as { detail?: { parameters?: { in: string; name: string }[] } }).detail?.parameters ?? []
    queries.set(
      `${route.method} ${route.path}`,
      parameters.filter((parameter) => parameter.in === 'query').map((parameter) => parameter.name),
    )
  }
  return app
}
