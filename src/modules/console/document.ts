/**
 * The console API's own OpenAPI document, served on the console listener (never on the API's): its
 * schemas are the TypeBox objects that validate the bodies (model.ts).
 */
import { SCHEMAS } from './model'

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` })
const json = (description: string, schema: string) => ({ description, content: { 'application/json': { schema: ref(schema) } } })
const error = (description: string) => json(description, 'Error')
const noContent = { description: 'Done.' }
const body = (schema: string) => ({ required: true, content: { 'application/json': { schema: ref(schema) } } })
const path = (name: string, description: string) => ({ name, in: 'path', required: true, schema: { type: 'string' }, description })
const keyId = path('id', 'The key\'s id (key_...).')

const ERRORS = {
  400: error('The request is malformed; the message names the field.'),
  401: error('No session or token, or it ended (signed out, idle, password reset, operator removed).'),
  403: error('A state-changing request with a session cookie but without this console\'s own Origin.'),
  404: error('No such key (or an id not shaped like a key id).'),
  413: error('A body over 8 KiB (by its Content-Length, or as it arrives); the connection is closed.'),
  421: error('The Host (or a trusted proxy\'s X-Forwarded-Host) is not one of the console\'s names (--console-host).'),
  503: error('Storage cannot serve this now.'),
}
/** Every route can answer 413 and 421: the guard that runs before routing gives them. */
const errors = (...statuses: (keyof typeof ERRORS)[]) =>
  Object.fromEntries([...statuses, 413, 421].map((status) => [status, ERRORS[status as keyof typeof ERRORS]]))

function operation(summary: string, responses: object, extra: object = {}) {
  return { summary, responses, ...extra }
}

export function consoleDocument(version: string) {
  return {
    openapi: '3.1.0',
    info: {
      title: 'Pet Store console',
      version,
      description:
        'What the console does, for people who run the server: usage, keys, bans, deprecated calls, recent requests and the audit log. ' +
        'Usage figures are those of `petstore keys usage`: written to storage every 2 s, so they lag the traffic by up to about 2 s. ' +
        'A browser signs in (POST /api/session) and holds a session cookie; a script sends an operator token ' +
        '(`petstore operators token NAME`) as `Authorization: Bearer`. With the cookie, every request that changes ' +
        'something must carry this console\'s own `Origin`, and so must sign-in. The console answers only to its own ' +
        'address and the names given with `--console-host` (421 otherwise), and reads no body over 8 KiB (413).',
    },
    servers: [{ url: '/', description: 'this console' }],
    security: [{ session: [] }, { operatorToken: [] }],
    paths: {
      '/api/session': {
        post: operation(
          'Sign in: sets the session cookie',
          {
            200: json('Signed in.', 'Operator'),
            ...errors(400, 401, 403),
            429: error('Too many failed sign-ins for this name within 15 minutes; Retry-After says when to try again.'),
          },
          { security: [], requestBody: body('SignIn') },
        ),
        delete: operation('Sign out: ends this session', { 204: noContent, ...errors(401, 403) }),
      },
      '/api/me': { get: operation('Who is signed in', { 200: json('The operator.', 'Operator'), ...errors(401) }) },
      '/api/keys': {
        get: operation('Every key, with its day quota left and ban', { 200: json('The keys.', 'KeyList'), ...errors(401) }),
        post: operation(
          'Create a key; its secret is in this answer only',
          { 201: json('Created.', 'CreatedKey'), ...errors(400, 401, 403, 503) },
          { requestBody: body('NewKey') },
        ),
      },
      '/api/keys/{id}': {
        delete: operation('Revoke a key: refused by the API within a second', { 204: noContent, ...errors(401, 403, 404, 503) }, { parameters: [keyId] }),
      },
      '/api/keys/{id}/reset-limits': {
        post: operation('Refill a key\'s buckets and lift its ban, within a second', { 204: noContent, ...errors(401, 403, 404, 503) }, { parameters: [keyId] }),
      },
      '/api/keys/{id}/plan': {
        put: operation(
          'Move a key to another plan (and its limits), within a second',
          { 204: noContent, ...errors(400, 401, 403, 404, 503) },
          { parameters: [keyId], requestBody: body('PlanChange') },
        ),
      },
      '/api/overview': {
        get: operation('The fleet\'s requests per minute (hour, day) and per hour (week) by outcome, p50/p99, active keys today, bans now', {
          200: json('The overview.', 'Overview'),
          ...errors(401),
        }),
      },
      '/api/keys/{id}/usage': {
        get: operation('One key\'s figures, its requests over a window by outcome, and its recent refusals', { 200: json('The key\'s usage.', 'KeyUsage'), ...errors(400, 401, 404) }, {
          parameters: [
            keyId,
            { name: 'window', in: 'query', schema: { type: 'string', enum: ['hour', 'day', 'week'], default: 'day' }, description: 'hour and day by the minute, week by the hour.' },
          ],
        }),
      },
      '/api/deprecation': {
        get: operation('Who still calls the deprecated getPet (GET /pets/{petId}), and the days left until its sunset', {
          200: json('The callers.', 'Deprecation'),
          ...errors(401),
        }),
      },
      '/api/bans': { get: operation('Current bans of keys and client addresses', { 200: json('The bans.', 'BanList'), ...errors(401) }) },
      '/api/bans/keys/{id}': {
        delete: operation('Lift a key\'s ban (a limit reset), within a second', { 204: noContent, ...errors(401, 403, 404, 503) }, { parameters: [keyId] }),
      },
      '/api/bans/addresses/{address}': {
        delete: operation('Lift a client address\'s ban', { 204: noContent, ...errors(400, 401, 403) }, {
          parameters: [path('address', 'The address as the ban list gives it (an IPv6 client is banned by its /64), URL-encoded.')],
        }),
      },
      '/api/requests': {
        get: operation('The API\'s recent answers (this instance\'s), newest first', { 200: json('The requests.', 'RecentRequests'), ...errors(400, 401) }, {
          parameters: [
            { name: 'key', in: 'query', schema: { type: 'string' }, description: 'Only requests with this key id.' },
            { name: 'status', in: 'query', schema: { type: 'integer', minimum: 100, maximum: 599 }, description: 'Only answers with this status.' },
            { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 5000, default: 200 } },
          ],
        }),
      },
      '/api/audit': {
        get: operation('The audit log, newest first', { 200: json('The entries.', 'AuditLog'), ...errors(400, 401) }, {
          parameters: [{ name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 5000, default: 200 } }],
        }),
      },
      '/api/openapi.json': { get: operation('This document', { 200: { description: 'The OpenAPI document.' }, ...errors(401) }) },
    },
    components: {
      securitySchemes: {
        session: { type: 'apiKey', in: 'cookie', name: 'petstore_console', description: 'Set by POST /api/session; HttpOnly, SameSite=Strict.' },
        operatorToken: { type: 'http', scheme: 'bearer', description: 'An operator token from `petstore operators token NAME`.' },
      },
      schemas: SCHEMAS,
    },
  }
}
