/**
 * Pieces of the OpenAPI description that routes attach as `detail`, built from the TypeBox models so
 * the document and the validation cannot drift apart. Requests are validated by our own strict code,
 * so routes describe their parameters and bodies here rather than through Elysia's coercing validator.
 */
import type { TObject } from '@sinclair/typebox'

const RATE_LIMIT_HEADERS = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit', 'RateLimit-Policy']
const COMMON_HEADERS = [...RATE_LIMIT_HEADERS, 'X-Request-Id']

const ref = (kind: string, name: string) => ({ $ref: `#/components/${kind}/${name}` })

function headerRefs(names: string[]) {
  return Object.fromEntries(names.map((name) => [name, ref('headers', name)]))
}

/** A JSON response with the headers every answer under the base carries, plus `extraHeaders`. */
export function jsonResponse(description: string, schema: object, extraHeaders: string[] = []) {
  return {
    description,
    headers: headerRefs([...COMMON_HEADERS, ...extraHeaders]),
    content: { 'application/json': { schema } },
  }
}

export const schemaRef = (name: string) => ref('schemas', name)

/** Shared error responses by status, defined once under components.responses. */
export function errorResponses(statuses: number[]) {
  return Object.fromEntries(statuses.map((status) => [String(status), ref('responses', ERROR_NAMES[status]!)]))
}

const ERROR_NAMES: Record<number, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  404: 'NotFound',
  409: 'IdempotencyConflict',
  413: 'PayloadTooLarge',
  415: 'UnsupportedMediaType',
  429: 'TooManyRequests',
  500: 'InternalError',
  501: 'NotImplemented',
  503: 'Unavailable',
}

/** OpenAPI parameters for each property of a TypeBox object. */
export function parametersFrom(schema: TObject, where: 'query' | 'path') {
  const required = new Set(schema.required ?? [])
  return Object.entries(schema.properties).map(([name, property]) => {
    const { description, ...rest } = property as { description?: string }
    return { name, in: where, required: where === 'path' || required.has(name), description, schema: rest }
  })
}

export function components(errorSchema: object) {
  const error = (description: string, codes: string[], extra: string[] = []) => ({
    description: `${description} Codes: ${codes.map((c) => `\`${c}\``).join(', ')}.`,
    headers: headerRefs([...COMMON_HEADERS, ...extra]),
    content: { 'application/json': { schema: errorSchema } },
  })
  // `required` marks the headers sent on every response that lists them; Link and Idempotent-Replayed
  // appear only when there is a next page or a replay.
  const integer = (description: string) => ({ description, required: true, schema: { type: 'integer' } })
  const text = (description: string, required = true) => ({ description, required, schema: { type: 'string' } })
  return {
    securitySchemes: {
      bearerAuth: { type: 'http', scheme: 'bearer', description: 'API key sent as `Authorization: Bearer <key>`.' },
    },
    headers: {
      'X-RateLimit-Limit': integer('Capacity of the rate-limit bucket in force (the one with fewer tokens left).'),
      'X-RateLimit-Remaining': integer('Whole requests left in that bucket after this one.'),
      'X-RateLimit-Reset': integer('Unix time (seconds) at which that bucket is full again.'),
      RateLimit: text('IETF draft field: `"<window>";r=<remaining>;t=<seconds to reset>` of the bucket in force.'),
      'RateLimit-Policy': text('IETF draft field: `"minute";q=<rpm>;w=60, "day";q=<rpd>;w=86400`.'),
      'X-Request-Id': text('The request id: the client\'s own when sane, else one the server made.'),
      'Retry-After': integer('Seconds to wait before retrying (at least 1).'),
      'WWW-Authenticate': text('`Bearer realm="petstore"`, with `error="invalid_token"` for a wrong or revoked key.'),
      Location: { description: 'Absolute URL of the created pet.', required: true, schema: { type: 'string', format: 'uri' } },
      Link: text('RFC 8288 links: `rel="next"` for the next page; `rel="successor-version"` on the deprecated getPet.', false),
      Deprecation: text('RFC 9745: when the operation was deprecated, as `@<unix seconds>`.'),
      Sunset: text('RFC 8594: when the operation will be removed.'),
      'Idempotent-Replayed': text('`true` when this is the stored answer to an earlier request with the same Idempotency-Key.', false),
    },
    responses: {
      BadRequest: error('The request is malformed; the message names the field and why.', ['invalid_request']),
      Unauthorized: error('API key missing or invalid.', ['unauthorized'], ['WWW-Authenticate']),
      NotFound: error('The requested resource could not be found.', ['not_found']),
      IdempotencyConflict: error('The Idempotency-Key was used with a different body.', ['idempotency_conflict']),
      PayloadTooLarge: error('The body is larger than 64 KiB.', ['payload_too_large']),
      UnsupportedMediaType: error('The body is not application/json.', ['unsupported_media_type']),
      TooManyRequests: error(
        'Rate limit exceeded, or the key (or address) is banned for ignoring 429s.',
        ['rate_limited', 'key_banned'],
        ['Retry-After'],
      ),
      InternalError: error('The server failed; details are in its log under the request id.', ['internal_error']),
      NotImplemented: error('The operation exists but this server does not implement it.', ['not_implemented']),
      Unavailable: error('Storage cannot serve this: it refuses writes (disk full, read-only file; reads go on), or the data file is gone or damaged.', ['unavailable']),
    },
  }
}
