/**
 * Pieces of the OpenAPI description that routes attach as `detail`, built from the TypeBox models so
 * the document and the validation cannot drift apart. Requests are validated by our own strict code,
 * so routes describe their parameters and bodies here rather than through Elysia's coercing validator.
 */
import type { TObject } from '@sinclair/typebox'
import type { Elysia } from 'elysia'
import { INT64_MAX, INT64_MIN } from '../domain/pet'
import {
  addressBanned,
  badRequest,
  idempotencyConflict,
  internalError,
  keyBanned,
  notImplemented,
  payloadTooLarge,
  petNotFound,
  rateLimited,
  requestTimeout,
  storageUnavailable,
  unsupportedMediaType,
} from './api-errors'
import { keyExpired, MISSING_KEY } from './bearer-token'
import { BODY_DEADLINE_MS } from './json-body'
import { REQUEST_ID_RULE } from './request-id'

// Elysia's generic parameters carry nothing useful across this boundary.
// biome-ignore lint/suspicious/noExplicitAny: any Elysia instance, whatever its generics
export type AnyElysia = Elysia<any, any, any, any, any, any, any>

const RATE_LIMIT_HEADERS = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit', 'RateLimit-Policy']
const COMMON_HEADERS = [...RATE_LIMIT_HEADERS, 'X-Request-Id']

const ref = (kind: string, name: string) => ({ $ref: `#/components/${kind}/${name}` })

/** A header of an answer: its name, or its name and the component that describes it there. */
export type HeaderName = string | readonly [name: string, component: string]

function headerRefs(names: readonly HeaderName[]) {
  return Object.fromEntries(
    names.map((name) => (typeof name === 'string' ? [name, ref('headers', name)] : [name[0], ref('headers', name[1])])),
  )
}

/** getPet's fields, on every answer it gives; its Link there is always the successor's. */
export const DEPRECATION_HEADERS: HeaderName[] = ['Deprecation', 'Sunset', ['Link', 'SuccessorLink']]

/**
 * The request header every operation takes: the server echoes a sane id and logs it, and replaces any
 * other value (never refuses it), so the schema states no pattern.
 */
export const REQUEST_ID_PARAMETER = {
  name: 'X-Request-Id',
  in: 'header',
  required: false,
  description:
    `Your id for this request: when it is ${REQUEST_ID_RULE}, the answer's X-Request-Id echoes it and the server's log ` +
    'line carries it; any other value is replaced by an id the server makes, never refused.',
  schema: { type: 'string' },
}

/** A JSON response with the headers every answer under the base carries, plus `extraHeaders`. */
export function jsonResponse(description: string, schema: object, extraHeaders: readonly HeaderName[] = []) {
  return {
    description,
    headers: headerRefs([...COMMON_HEADERS, ...extraHeaders]),
    content: { 'application/json': { schema } },
  }
}

export const schemaRef = (name: string) => ref('schemas', name)

/**
 * Shared error responses by status, defined once under components.responses. An operation whose every
 * answer carries more headers (getPet's deprecation fields) gets its own copies that list them too.
 */
// Document fragments are handed to Elysia's `detail`, typed by its OpenAPI types; any is the honest type.
// biome-ignore lint/suspicious/noExplicitAny: Elysia types `detail.responses` with its own OpenAPI types
export function errorResponses(statuses: number[], extraHeaders: readonly HeaderName[] = []): Record<string, any> {
  if (extraHeaders.length === 0)
    return Object.fromEntries(statuses.map((status) => [String(status), ref('responses', ERROR_NAMES[status]!)]))
  const shared: Record<string, { headers: object }> = components().responses
  return Object.fromEntries(
    statuses.map((status) => {
      const response = shared[ERROR_NAMES[status]!]!
      return [String(status), { ...response, headers: { ...response.headers, ...headerRefs(extraHeaders) } }]
    }),
  )
}

/**
 * Where a first key comes from, for the document and the docs page. The same document is served in every
 * environment, so it names the staging file too (a staging reader must not pick up production's key).
 */
export const KEY_HINT =
  'The first start with no keys writes a Free key to a file beside the data file, named after it ' +
  '(`petstore-bootstrap-key.txt` beside the default `petstore.db`, `petstore-staging-bootstrap-key.txt` in staging; ' +
  'the startup line names the file). `petstore keys create --plan pro` makes more: give it the same `--env`, ' +
  '`--data` or `PETSTORE_DATABASE_URL` as the server.'

const ERROR_NAMES: Record<number, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  404: 'NotFound',
  408: 'RequestTimeout',
  409: 'IdempotencyConflict',
  413: 'PayloadTooLarge',
  415: 'UnsupportedMediaType',
  429: 'TooManyRequests',
  500: 'InternalError',
  501: 'NotImplemented',
  503: 'Unavailable',
}

/**
 * OpenAPI parameters for each property of a TypeBox object, each with the example its schema gives (a
 * docs page sends it as the value, so only meaningful ones are given).
 */
export function parametersFrom(schema: TObject, where: 'query' | 'path') {
  const required = new Set(schema.required ?? [])
  return Object.entries(schema.properties).map(([name, property]) => {
    const { description, examples, ...rest } = property as { description?: string; examples?: unknown[] }
    return { name, in: where, required: where === 'path' || required.has(name), description, example: examples?.[0], schema: asEnum(rest) }
  })
}

/** A union of string literals as the plain `enum` it means: Swagger UI offers a choice for an enum, a text box for anyOf. */
function asEnum(schema: { anyOf?: { const?: unknown; type?: string }[] }): object {
  const values = schema.anyOf?.map((alternative) => alternative.const)
  if (!values?.every((value) => typeof value === 'string')) return schema
  const { anyOf: _, ...rest } = schema
  return { ...rest, type: 'string', enum: values }
}

/**
 * The schemas of the document, each named component referenced by `$ref` where another uses it
 * (Pets' items are Pet, every status is PetStatus), built from the same models that validate requests.
 */
export function schemaComponents(models: { Pet: TObject; NewPet: TObject; Error: TObject; PetStatus: object; maxPets: number }) {
  const statusRef = ref('schemas', 'PetStatus')
  const withStatusRef = (model: TObject) => {
    const { status, ...properties } = model.properties as Record<string, { default?: unknown }>
    return { ...model, properties: { ...properties, status: { ...statusRef, ...(status?.default ? { default: status.default } : {}) } } }
  }
  return {
    PetStatus: models.PetStatus,
    Pet: withStatusRef(models.Pet),
    NewPet: withStatusRef(models.NewPet),
    // `type` beside the reference lets Swagger UI name the items' type before it resolves the reference.
    Pets: {
      type: 'array',
      items: { ...ref('schemas', 'Pet'), type: 'object' },
      maxItems: models.maxPets,
      description: 'A page of pets: an array of Pet, in id order.',
    },
    Error: models.Error,
  }
}

/** JSON.rawJSON (Bun has it; TypeScript's lib does not declare it yet): a value JSON.stringify writes as given. */
const rawJSON = (JSON as unknown as { rawJSON(text: string): object }).rawJSON

/**
 * The document as served, in one pass: every int64 schema with int64's bounds where it states none of its
 * own, written as exact digits (a JS number cannot hold 2^63 − 1, so JSON.stringify would write
 * 9223372036854776000); and without the `$id` Elysia's `.model()` gives each schema
 * (`#/components/schemas/<name>`), which JSON Schema 2020-12 forbids and Swagger UI cannot resolve
 * (references use `$ref`).
 */
export function asServed<T>(value: T): T {
  if (Array.isArray(value)) return value.map(asServed) as T
  if (value === null || typeof value !== 'object') return value
  const object = Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => key !== '$id')
      .map(([key, v]) => [key, asServed(v)]),
  )
  if (object.type !== 'integer' || object.format !== 'int64') return object as T
  return { ...object, minimum: object.minimum ?? rawJSON(String(INT64_MIN)), maximum: object.maximum ?? rawJSON(String(INT64_MAX)) } as T
}

/** What the error examples depend on: the settings the server runs with. */
export interface ExampleSettings {
  banAfter: number
  banSeconds: number
  maxBodyBytes: number
}

/**
 * Each error code's example, made by the builder the server answers with and the settings it runs with
 * (a ban says --ban-seconds), as the document's `components.examples`; the error answers refer to them.
 */
export function errorExamples({ banAfter, banSeconds, maxBodyBytes }: ExampleSettings): Record<string, object> {
  const answers = [
    badRequest('limit: must be an integer from 1 to 100'),
    MISSING_KEY,
    keyExpired({ endsAt: Date.UTC(2027, 0, 31, 18), replacedAt: null }),
    petNotFound('42'),
    requestTimeout(BODY_DEADLINE_MS / 1000),
    idempotencyConflict(),
    payloadTooLarge(maxBodyBytes),
    unsupportedMediaType(),
    rateLimited(1, banAfter),
    keyBanned(banSeconds, banAfter),
    addressBanned(banSeconds, banAfter),
    internalError(),
    notImplemented('GET /store/orders'),
    storageUnavailable(true),
  ]
  return Object.fromEntries(answers.map(({ code, message, status }) => [code, { summary: code, value: { code, message, status } }]))
}

/**
 * The document's shared parts. With `scenarios` on, every error answer may name what a `Prefer`
 * applied (`Preference-Applied`); the operations' own answers get it in the document builder.
 */
export function components(scenarios = false) {
  const applied = scenarios ? ['Preference-Applied'] : []
  const error = (
    description: string,
    codes: string[],
    extra: string[] = [],
    headers: object = headerRefs([...COMMON_HEADERS, ...extra, ...applied]),
  ) => ({
    description: `${description} Codes: ${codes.map((c) => `\`${c}\``).join(', ')}.`,
    headers,
    content: {
      'application/json': {
        schema: schemaRef('Error'),
        examples: Object.fromEntries(codes.map((code) => [code, ref('examples', code)])),
      },
    },
  })
  // `required` marks the headers sent on every response that lists them; Link and Idempotent-Replayed
  // appear only when there is a next page or a replay.
  const integer = (description: string) => ({ description, required: true, schema: { type: 'integer' } })
  const text = (description: string, required = true) => ({ description, required, schema: { type: 'string' } })
  const headers = {
    'X-RateLimit-Limit': integer('Capacity of the rate-limit bucket in force (the one with fewer tokens left).'),
    'X-RateLimit-Remaining': integer('Whole requests left in that bucket after this one.'),
    'X-RateLimit-Reset': integer('Unix time (seconds) at which that bucket is full again.'),
    RateLimit: text('IETF draft field: `"<window>";r=<remaining>;t=<seconds to reset>` of the bucket in force.'),
    'RateLimit-Policy': text('IETF draft field: `"minute";q=<rpm>;w=60, "day";q=<rpd>;w=86400`.'),
    'X-Request-Id': text("The request id: the client's own when sane, else one the server made."),
    'Retry-After': integer('Seconds to wait before retrying (at least 1).'),
    'WWW-Authenticate': text(
      '`Bearer realm="petstore"`, with `error="invalid_token"` for a wrong, revoked or expired key (and, for an expired one, `error_description` saying when).',
    ),
    Location: {
      description:
        'URL of the created pet: absolute under the base URL, or a relative reference (`/v1/pets/42`) when the server was given ' +
        'no base URL and listens beyond loopback.',
      required: true,
      schema: { type: 'string', format: 'uri-reference' },
    },
    Link: text(
      'RFC 8288 links: `rel="next"` for the next page; `rel="successor-version"` on the deprecated getPet. Their targets are ' +
        'relative references when the server was given no base URL and listens beyond loopback.',
      false,
    ),
    SuccessorLink: text(
      'RFC 8288: `<BASE/pets>; rel="successor-version"`, the operation that replaces this one (a relative reference when the ' +
        'server was given no base URL and listens beyond loopback).',
    ),
    Deprecation: text('RFC 9745: when the operation was deprecated, as `@<unix seconds>`.'),
    Sunset: text('RFC 8594: when the operation will be removed.'),
    'Idempotent-Replayed': text('`true` when this is the stored answer to an earlier request with the same Idempotency-Key.', false),
    'Preference-Applied': text(
      'RFC 7240: the scenarios of `Prefer` this answer applied (`code=503`, `delay=2000`, `fail=2, code=503`); absent when none was.',
      false,
    ),
  }
  // The rate-limit fields of a 503, which has them unless it is the limiter itself that does not answer.
  const unlessLimiterDown = Object.fromEntries(
    RATE_LIMIT_HEADERS.map((name) => {
      const header = headers[name as keyof typeof headers]
      const description = `${header.description} Absent when the shared rate limiter does not answer: no bucket can be read then.`
      return [name, { ...header, required: false, description }]
    }),
  )
  return {
    securitySchemes: {
      bearerAuth: {
        type: 'http',
        scheme: 'bearer',
        description: `API key sent as \`Authorization: Bearer <key>\`. ${KEY_HINT}`,
      },
    },
    headers,
    responses: {
      BadRequest: error(
        'The request is malformed; the message names the field and why (`Host:` for a Host header the server cannot read, ' +
          'answered before routing with the rate-limit fields of the bucket the request would be counted in, nothing taken). ' +
          'A request the HTTP parser itself cannot read (a header with a control character such as 0x01 in its value, a ' +
          "malformed request line) is refused by the parser before any of the server's code runs: a bare 400 with " +
          '`Connection: close` and nothing else, no body, no `X-Request-Id` and no rate-limit fields.',
        ['invalid_request'],
      ),
      Unauthorized: error('API key missing, invalid, or past its expiry.', ['unauthorized', 'key_expired'], ['WWW-Authenticate']),
      NotFound: error('The requested resource could not be found.', ['not_found']),
      RequestTimeout: error(`The body did not arrive within ${BODY_DEADLINE_MS / 1000} s of the request; the connection is closed.`, [
        'request_timeout',
      ]),
      IdempotencyConflict: error('The Idempotency-Key was used with a different body.', ['idempotency_conflict']),
      PayloadTooLarge: error('The body is larger than 64 KiB.', ['payload_too_large']),
      UnsupportedMediaType: error(
        'The body is not application/json, or it comes in a content coding (`Content-Encoding: gzip`, …): send it uncompressed.',
        ['unsupported_media_type'],
        [],
        {
          ...headerRefs([...COMMON_HEADERS, ...applied]),
          'Accept-Encoding': text('`identity`, when the refusal is for the content coding.', false),
        },
      ),
      TooManyRequests: error(
        'Rate limit exceeded, or the key (`key_banned`) or the client address (`address_banned`) is banned for ignoring 429s; ' +
          "while banned, `X-RateLimit-Remaining` is 0 and `X-RateLimit-Reset` is the ban's end.",
        ['rate_limited', 'key_banned', 'address_banned'],
        ['Retry-After'],
      ),
      InternalError: error('The server failed; details are in its log under the request id.', ['internal_error']),
      NotImplemented: error('The operation exists but this server does not implement it.', ['not_implemented']),
      // A 503 from a limiter that does not answer has no rate-limit fields to give.
      Unavailable: error(
        'Storage cannot serve this (it refuses writes: disk full, read-only file, database down; reads go on where they can; ' +
          'or the data file is gone or damaged), or too many request bodies are arriving at once (then with `Retry-After: 1`, and ' +
          'the connection is closed), or too many delayed or failing scenarios are waiting (`Prefer`, staging), each with the ' +
          'rate-limit fields of the bucket in force; or the shared rate limiter (Redis) does not answer: then with ' +
          '`Retry-After: 1` and no rate-limit fields, as no bucket can be read (a `Prefer: code=503` answer looks the same).',
        ['unavailable'],
        [],
        {
          ...unlessLimiterDown,
          ...headerRefs(['X-Request-Id', ...applied]),
          'Retry-After': { description: 'Seconds to wait before retrying, when known.', required: false, schema: { type: 'integer' } },
        },
      ),
    },
  }
}
