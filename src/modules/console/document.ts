/**
 * The console API's OpenAPI document, generated from its routes as the API's is (@elysiajs/openapi's
 * generator over the app). Each route carries its own `detail`, made by `operation` from the models;
 * what the app's hooks answer is added from the app's structure, so no route restates it: 413 and 421
 * (the check before routing) and 500 and 503 on every route, 415 on each that takes a body, and, on each
 * route the operator guard runs before, 401, 400 (the query check), 403 on a change (the Origin check) and
 * 404 for a key id.
 */
import { toOpenAPISchema } from '@elysiajs/openapi/openapi'
import type { TObject } from '@sinclair/typebox'
import { type AnyElysia, parametersFrom } from '../../http/openapi'
import type { RouteInfo } from '../../http/routes'
import { PLAN_LIMITS } from '../../domain/plans'
import { USAGE_WRITE_MS } from '../../domain/usage'
import { MAX_BODY_BYTES, SCHEMAS, type SchemaName, SESSION_COOKIE } from './model'

const KIB = MAX_BODY_BYTES / 1024

const TAGS = {
  session: 'Signing in and out.',
  keys: 'The API keys: list, create, revoke, change plan, reset limits.',
  usage: 'Requests by outcome over time, per key and for the fleet; callers of the deprecated getPet.',
  bans: 'Keys and client addresses banned now, and lifting a ban.',
  log: "The API's recent answers and the audit log.",
  document: 'This document.',
}
type Tag = keyof typeof TAGS

/** A JSON body of one of the model's schemas. */
const jsonOf = (name: SchemaName) => ({ 'application/json': { schema: { $ref: `#/components/schemas/${name}` } } })

/** An answer without a body. */
export const done = (description: string, headers?: Record<string, object>) => ({ description, ...(headers ? { headers } : {}) })
/** A JSON answer of one of the model's schemas. */
export const json = (description: string, schema: SchemaName, headers?: Record<string, object>) => ({
  ...done(description, headers),
  content: jsonOf(schema),
})
export const THIS_DOCUMENT = { description: 'The OpenAPI document.', content: { 'application/json': { schema: { type: 'object' } } } }
const error = (description: string) => json(description, 'Error')

/** A header an answer always carries. */
const header = (description: string, schema: object = { type: 'string' }) => ({ description, required: true, schema })
export const HEADERS = {
  setCookie: {
    'Set-Cookie': header(
      `The session cookie \`${SESSION_COOKIE}\` (\`${SESSION_COOKIE}_staging\` with --env staging): HttpOnly, SameSite=Strict, Path=/ (Secure behind a trusted HTTPS proxy).`,
    ),
  },
  endedCookie: { 'Set-Cookie': header('The session cookie, emptied with Max-Age=0.') },
  retryAfter: { 'Retry-After': header('Seconds until the name may try again.', { type: 'integer', minimum: 1 }) },
}

const ERRORS = {
  400: error(
    'The request is malformed (a query parameter the route does not declare, or one given twice, included); the message names the field.',
  ),
  401: error('No session or token, or it ended (signed out, idle, password reset, operator removed).'),
  403: error("A sign-in, or a request that changes something with the session cookie, without this console's own Origin."),
  404: error('No such key (or an id not shaped like a key id, refused before anything looks for it).'),
  413: error(`A body over ${KIB} KiB (by its Content-Length, before anything else, or as it arrives); the connection is closed.`),
  415: error(
    'The body is not `Content-Type: application/json`, or it comes compressed (`Content-Encoding`; then with `Accept-Encoding: identity`).',
  ),
  421: error(
    "The Host (or a trusted proxy's X-Forwarded-Host) is not one of the console's names (--console-host); refused before anything else.",
  ),
  429: json(
    `Requests without a valid session or token share the API's limit for requests without a key, per client address (the Free plan's ${PLAN_LIMITS.free.rpm} a minute, then a ban); this address has spent it.`,
    'Error',
    { 'Retry-After': header('Seconds until the address may try again.', { type: 'integer', minimum: 1 }) },
  ),
  500: error('The server failed; details are in its log.'),
  503: error(
    'Storage, or the shared rate limiter (Redis), cannot serve this now; or the data file was replaced or found damaged, and changes are refused until a restart.',
  ),
}
type Status = keyof typeof ERRORS

/** Answered on every route: the check before routing, and the failures any route can meet. */
const EVERY_ROUTE: Status[] = [413, 421, 500, 503]

interface OperationSpec {
  /** The route's own answers (errors its handler gives included); those every route gives are added. */
  responses: Record<number, object>
  /** Statuses of ERRORS this route's handler answers besides (415 comes with a body). */
  errors?: Status[]
  body?: SchemaName
  path?: TObject
  query?: TObject
}

/** A route's hook object: its `detail`, every field of which the document takes from the route. */
export function operation(operationId: string, tag: Tag, summary: string, spec: OperationSpec) {
  const { responses, errors: own = [], body, path, query } = spec
  // A route that reads a body reads JSON only.
  const errors: Status[] = body ? [...own, 415] : own
  const parameters = [...(path ? parametersFrom(path, 'path') : []), ...(query ? parametersFrom(query, 'query') : [])]
  return {
    detail: {
      operationId,
      tags: [tag],
      summary,
      ...(parameters.length ? { parameters } : {}),
      ...(body ? { requestBody: { required: true, description: `JSON, at most ${KIB} KiB.`, content: jsonOf(body) } } : {}),
      // Elysia types `detail` with its OpenAPI types; this is an OpenAPI responses object.
      // biome-ignore lint/suspicious/noExplicitAny: see above
      responses: { ...responses, ...Object.fromEntries(errors.map((status) => [status, ERRORS[status]])) } as Record<string, any>,
    },
  }
}

/** A route left out of the document: the page's files. */
export const UNDOCUMENTED = { detail: { hide: true } }

type Operation = { parameters?: unknown[]; responses?: Record<string, object>; security?: unknown[] }

/**
 * The document of `app`'s routes. `guarded` says whether a route is behind the operator guard (it
 * then answers 401 without a session or token, and the document's security applies to it);
 * `cookieName` is the session cookie's, which says the server's environment (controller/cookies.ts).
 */
export function consoleDocument(app: AnyElysia, version: string, guarded: (route: RouteInfo) => boolean, cookieName: string) {
  const generated = toOpenAPISchema(app, { staticFile: false })
  for (const route of app.routes as RouteInfo[]) {
    const item = generated.paths[route.path.replace(/:([^/]+)/g, '{$1}')] as Record<string, Operation> | undefined
    const found = item?.[route.method.toLowerCase()]
    if (!found) continue
    // The generator gives path parameters as untyped strings: put the route's own back.
    const parameters = (route.hooks as { detail?: Operation }).detail?.parameters
    if (parameters) found.parameters = parameters
    const statuses = [...EVERY_ROUTE]
    if (guarded(route)) {
      statuses.push(400, 401, 429)
      if (route.method !== 'GET') statuses.push(403)
      if (route.path.includes(':id')) statuses.push(404)
    } else found.security = []
    found.responses = Object.fromEntries(
      Object.entries({ ...Object.fromEntries(statuses.map((status) => [status, ERRORS[status]])), ...found.responses }).sort(),
    )
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Pet Store console',
      version,
      description:
        'What the console does, for people who run the server: usage, keys, bans, deprecated calls, recent requests and the audit log. ' +
        `Usage figures are those of \`petstore keys usage\`: written to storage every ${USAGE_WRITE_MS / 1000} s, so they lag the traffic by up to about ${USAGE_WRITE_MS / 1000} s. ` +
        'A browser signs in (POST /api/session) and holds a session cookie; a script sends an operator token ' +
        '(`petstore operators token NAME`) as `Authorization: Bearer`. With the cookie, every request that changes ' +
        "something must carry this console's own `Origin`, and so must sign-in. The console answers only to its own " +
        `address and the names given with \`--console-host\` (421 otherwise), and reads no body over ${KIB} KiB (413) and none but JSON (415).`,
    },
    servers: [{ url: '/', description: 'this console' }],
    security: [{ session: [] }, { operatorToken: [] }],
    tags: Object.entries(TAGS).map(([name, description]) => ({ name, description })),
    paths: generated.paths,
    components: {
      securitySchemes: {
        session: {
          type: 'apiKey',
          in: 'cookie',
          name: cookieName,
          description: 'Set by POST /api/session; HttpOnly, SameSite=Strict.',
        },
        operatorToken: { type: 'http', scheme: 'bearer', description: 'An operator token from `petstore operators token NAME`.' },
      },
      schemas: SCHEMAS,
    },
  }
}
