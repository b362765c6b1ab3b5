/**
 * The console's app: its page, and the JSON API the page uses, on a listener of its own, never the
 * API's. Each route carries its own OpenAPI detail, from which document.ts makes the document. The page
 * (page/) holds no data and is served to anyone, so that they can sign in; everything it shows comes
 * from the API. Every answer carries a Content-Security-Policy without inline script and refuses framing.
 *
 * Each step of a request has a file of its own in controller/: what a trusted proxy says (proxy.ts); the
 * host name and declared size every request passes first, in onRequest (admission.ts); the page's files
 * and security headers (page-assets.ts); the guard of every route after sign-in (guard.ts), which finds
 * the operator (operator.ts, cookies.ts, origin.ts) before any body is read; the bodies, read by the
 * bounded reader and never by Elysia (`parse: 'none'`), a body left unread closing its connection
 * (bodies.ts); query and path parameters (parameters.ts); the API's recent answers (recent.ts).
 */
import { Elysia } from 'elysia'
import type { Server } from 'bun'
import { noFavicon } from '../../http/assets'
import type { TrustedProxies } from '../../http/client-address'
import { bodyUnread } from '../../http/json-body'
import type { AnyElysia } from '../../http/openapi'
import { RouteTable } from '../../http/routes'
import { SESSION_IDLE_MS, THROTTLE_FAILURES, THROTTLE_NAME_FAILURES, THROTTLE_WINDOW_MS } from '../../domain/operators'
import { MINUTE_MS } from '../../domain/time'
import { errorHandler } from '../../plugins/error-answers'
import type { RecentRequests } from '../../observability/recent-requests'
import { consoleDocument, done, HEADERS, json, operation, THIS_DOCUMENT, UNDOCUMENTED } from './document'
import { AddressParams, AuditQuery, KeyParams, KeysQuery, type Model, RequestsQuery, RevokedKeys, UsageQuery, UsageWindow } from './model'
import page from './page/index.html'
import { RecentAnswers } from './controller/recent'
import { ConsoleService, type ConsoleServiceDeps } from './service'
import { admission } from './controller/admission'
import { consoleBodies } from './controller/bodies'
import { sessionCookie, sessionCookieName } from './controller/cookies'
import { consoleGuard } from './controller/guard'
import { type KeylessLimits, operatorOf, type Who } from './controller/operator'
import { originCheck } from './controller/origin'
import { SECURITY_HEADERS, pageFiles } from './controller/page-assets'
import { addressSubjectOf, choiceOf, integerParameter, keyPageOf, limitOf } from './controller/parameters'
import { proxyReading } from './controller/proxy'

export type { KeylessLimits } from './controller/operator'

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
  /** The server's --env: it names the session cookie (controller/cookies.ts). */
  environment: string
  onInternalError: (error: unknown) => void
  /** Notes a failure that says the data file is damaged, and answers true; the answer is then 503. */
  damaged?: (error: unknown) => boolean
  /** Why the data file may no longer be written (replaced or damaged: readiness.ts), or null. */
  storageFault?: () => string | null
}

/** What a handler that answers 204 is given (noContent). */
type Context = {
  who: Who
  params: Record<string, string>
  request: Request
  set: { status?: number | string; headers: Record<string, unknown> }
}

/** A handler that answers 204 once `act` is done. */
const noContent =
  (act: (context: Context) => Promise<unknown>) =>
  async ({ who, params, request, set }: Context): Promise<string> => {
    await act({ who, params, request, set })
    set.status = 204
    return ''
  }

export function consoleModule(options: ConsoleOptions): AnyElysia {
  const service = new ConsoleService(options)
  const recent = new RecentAnswers(options.recent, options.storage)
  const routes = new RouteTable()
  const server = (): Server<unknown> | null => app.server
  const proxy = proxyReading(options.trustProxy, server)
  const { clientOf, isHttps } = proxy
  const admit = admission(options, server, proxy)
  const checkOrigin = originCheck(proxy)
  const cookieName = sessionCookieName(options.environment)
  const operator = operatorOf(service, options.keyless, clientOf, checkOrigin, cookieName)
  const { resolveOperator, behindGuard } = consoleGuard(operator, routes, options.storageFault)
  const bodies = consoleBodies()
  const asset = pageFiles(page)
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
            const input = await bodies.signIn(request, clientOf(request).name)
            const { secret, operator: name } = await service.signIn(input.name, input.password, clientOf(request).name)
            set.headers['set-cookie'] = sessionCookie(cookieName, secret, { secure: isHttps(request) })
            return { name, via: 'session', idleMinutes: SESSION_IDLE_MS / MINUTE_MS }
          },
          operation('signIn', 'session', 'Sign in: sets the session cookie', {
            body: 'SignIn',
            responses: {
              200: json('Signed in.', 'Operator', HEADERS.setCookie),
              401: json('Wrong operator name or password.', 'Error'),
              429: json(
                `Too many failed sign-ins for this name within ${THROTTLE_WINDOW_MS / MINUTE_MS} minutes, whatever the password: ${THROTTLE_FAILURES} from this address, or ${THROTTLE_NAME_FAILURES} from all.`,
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
            set.headers['set-cookie'] = sessionCookie(cookieName, '', { maxAge: 0 })
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
          () => (document ??= consoleDocument(app, options.version, behindGuard, cookieName)),
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
            const created = await service.createKey(who.operator, await bodies.newKey(request))
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
          noContent(async ({ who, params, request }) => service.setPlan(who.operator, params.id!, await bodies.plan(request))),
          operation('setPlan', 'keys', 'Move a key to another plan (and its limits), within a second', {
            path: KeyParams,
            body: 'PlanChange',
            responses: { 204: done('Moved.') },
          }),
        )
        .post(
          '/api/keys/:id/roll',
          async ({ who, params, request, set }) => {
            const rolled = await service.rollKey(who.operator, params.id!, await bodies.roll(request))
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
          noContent(async ({ who, params, request }) => service.setExpiry(who.operator, params.id!, await bodies.expiry(request))),
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
            return { requests: await recent.list({ keyId, status, limit: limitOf(query) }) }
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
            const usage = await service.keyUsage(params.id, choiceOf(new URL(request.url).searchParams, 'window', UsageWindow))
            return { ...usage, refusals: await recent.refusals(params.id) }
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
  return app
}
