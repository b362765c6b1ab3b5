/**
 * The console API's schemas, each declared once: the same TypeBox objects validate request bodies and
 * parameters, describe the answers in the console's OpenAPI document (GET /api/openapi.json), and give
 * the server and the page (type-only imports, so nothing of this file is in the page's bundle) the
 * types of what is sent. Imports nothing that needs Bun, so the page's tsconfig can check it.
 */
import { integerRule } from '../../domain/integer-range'
import { type Static, type TObject, type TProperties, type TSchema, Type } from '@sinclair/typebox'
import { DEPRECATED_OPERATION } from '../../domain/deprecation'
import { CUSTOM_LIMIT, DEFAULT_OVERLAP_MS, KEY_NAME_FORBIDDEN, KEY_NAME_MAX, LONGEST_OVERLAP_MS } from '../../domain/key-input'
import { OPERATOR_NAME, OPERATOR_NAME_RULE } from '../../domain/operator-name'
import { CUSTOM_PLAN, PLANS } from '../../domain/plans'
import { USAGE_WRITE_MS } from '../../domain/usage'
import { UNKNOWN_CLIENT } from '../../domain/subject'

/** No console request body is larger: a larger one is refused with 413 before it is read. */
export const MAX_BODY_BYTES = 8 * 1024
export const SESSION_COOKIE = 'petstore_console'

const Plan = Type.Union(
  PLANS.map((plan) => Type.Literal(plan)),
  { description: "free, pro and business carry their plan's limits; enterprise carries its own rpm and rpd." },
)
const Limit = (what: string) =>
  Type.Integer({ minimum: CUSTOM_LIMIT.min, maximum: CUSTOM_LIMIT.max, description: `${what}, for the enterprise plan only.` })
const Rpm = Limit('Requests per minute')
const Rpd = Limit('Requests per day')
const Time = (description: string) => Type.String({ format: 'date-time', description })
const NullableTime = (description: string) => Type.Union([Time(description), Type.Null()], { description })
/** A request body: a field it does not name is refused. */
const Body = <P extends TProperties>(properties: P) => Type.Object(properties, { additionalProperties: false })

export const SignIn = Body({
  name: Type.String({
    pattern: OPERATOR_NAME.source,
    description: `The operator's name: ${OPERATOR_NAME_RULE.replace('an operator name is ', '')}.`,
  }),
  password: Type.String({ description: "The operator's password." }),
})

export const NewKey = Body({
  plan: Plan,
  name: Type.Optional(
    Type.String({ maxLength: KEY_NAME_MAX, description: `A name to tell the key by (at most ${KEY_NAME_MAX} characters).` }),
  ),
  rpm: Type.Optional(Rpm),
  rpd: Type.Optional(Rpd),
})

export const PlanChange = Body({ plan: Plan, rpm: Type.Optional(Rpm), rpd: Type.Optional(Rpd) })

const MAX_OVERLAP_SECONDS = LONGEST_OVERLAP_MS / 1000
export const Roll = Body({
  overlapSeconds: Type.Optional(
    Type.Integer({
      minimum: 0,
      maximum: MAX_OVERLAP_SECONDS,
      description: `How long the previous secret keeps working, in seconds (default ${DEFAULT_OVERLAP_MS / 1000}, a day; 0 ends it now).`,
    }),
  ),
})
export const ExpiryChange = Body({
  expiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
    description: 'When the key expires (ISO 8601 with its zone, still to come), or null for never.',
  }),
})

/**
 * A body with a plan as the document states it: the validator's object (which names a wrong field in
 * its 400) with the rules the domain then applies: enterprise needs rpm and rpd, the other plans take
 * neither (limitsFor), and a key's name has no control or bidirectional formatting characters (checkKeyName). One alternative per
 * kind of plan, told apart by `plan`.
 */
function byPlan<T extends TObject>(object: T, description: string) {
  const { plan: _, rpm: __, rpd: ___, ...properties } = object.properties
  const rest = properties.name ? { ...properties, name: { ...properties.name, pattern: `^[^${KEY_NAME_FORBIDDEN}]*$` } } : properties
  const fixed = PLANS.filter((plan) => plan !== CUSTOM_PLAN)
  return Type.Unsafe<Static<T>>({
    description,
    oneOf: [
      Body({
        ...rest,
        plan: Type.Union(
          fixed.map((plan) => Type.Literal(plan)),
          { description: "The plan's own limits apply." },
        ),
      }),
      Body({ ...rest, plan: Type.Literal(CUSTOM_PLAN), rpm: Rpm, rpd: Rpd }),
    ],
  })
}

/** What each field must be, for the 400 that names it (the validator's, and the domain's rules as the console words them). */
export const FIELD_RULES: Record<string, string> = {
  name: `must be a string of at most ${KEY_NAME_MAX} characters, with no control or bidirectional formatting characters`,
  password: 'must be a string',
  plan: `must be one of ${PLANS.join(', ')}`,
  rpm: integerRule(CUSTOM_LIMIT.min, CUSTOM_LIMIT.max),
  rpd: integerRule(CUSTOM_LIMIT.min, CUSTOM_LIMIT.max),
  overlapSeconds: integerRule(0, MAX_OVERLAP_SECONDS),
  expiresAt: 'must be an ISO 8601 time with its zone (such as 2027-01-31T18:00:00Z) still to come, or null',
}

/** A key's working secrets, each with its last use and end (never the secret itself). */
const Versions = Type.Array(
  Type.Object({
    version: Type.Union([Type.Literal('newest'), Type.Literal('previous')], { description: 'Which secret of the key.' }),
    lastUsedAt: NullableTime("This secret's last request."),
    endsAt: NullableTime('When this secret stops working; null: never.'),
  }),
  {
    description:
      "The key's working secrets (never the secrets themselves): the newest, and after a roll the previous one until its overlap ends.",
  },
)

const Key = Type.Object({
  id: Type.String(),
  name: Type.String(),
  plan: Plan,
  rpm: Type.Integer({ description: 'Requests per minute.' }),
  rpd: Type.Integer({ description: 'Requests per day.' }),
  createdAt: Time('When the key was made.'),
  lastUsedAt: NullableTime('Last request with the key, saved every few seconds.'),
  revokedAt: NullableTime('When the key was revoked.'),
  expiresAt: NullableTime('When the key expires (refused from then on with 401 key_expired); null: never.'),
  format: Type.Union([Type.Literal('checked'), Type.Literal('legacy')], {
    description: "The secret's form: with a checksum, or made before secrets carried one.",
  }),
  versions: Versions,
  dayQuotaLeft: Type.Union([Type.Integer(), Type.Null()], {
    description:
      'Requests left in the day bucket now, as the limiter holds it (read without taking a token); null for a revoked key or when the limiter does not answer.',
  }),
  bannedUntil: NullableTime("When the key's ban ends; null when it is not banned."),
  requestsToday: Type.Integer({
    description: `Requests with the key in the UTC day so far (every instance's), as written to storage every ${USAGE_WRITE_MS / 1000} s.`,
  }),
  limitedToday: Type.Integer({ description: 'Of those, refused with 429.' }),
  deprecatedWeek: Type.Integer({
    description: 'Calls of the deprecated getPet (GET /pets/{petId}) in the last 7 days, from the start of the hour.',
  }),
})

const Count = (description: string) => Type.Integer({ minimum: 0, description })
const Outcomes = Type.Object({
  requests: Count('Every request.'),
  ok: Count('Answered 2xx.'),
  clientErrors: Count('Answered 4xx other than 429 (a bad request, no key, no such pet).'),
  limited: Count('Refused with 429 (a rate limit or a ban).'),
  notImplemented: Count('Answered 501: an operation this server does not implement, by design (GET /store/orders); no failure.'),
  serverErrors: Count('Answered 5xx other than 501: the server failed.'),
})
const Millis = Type.Union([Type.Number(), Type.Null()], {
  description: "Milliseconds: the upper bound of the duration histogram's bucket (within 2x); null without requests.",
})
const Counts = (description: string) => Type.Array(Type.Integer({ minimum: 0 }), { description })

/** A usage series as columns (what a chart draws): the points are `from`, `from + step`, ... up to now, zeros included. */
const Series = Type.Object(
  {
    resolution: Type.Union([Type.Literal('minute'), Type.Literal('hour')]),
    from: Time('Start of the first minute (or hour).'),
    stepSeconds: Type.Integer({ description: 'The points are from, from + step, ... up to now; 60 or 3600.' }),
    ok: Counts('2xx per point.'),
    clientErrors: Counts('4xx other than 429 per point.'),
    limited: Counts('429 per point.'),
    notImplemented: Counts('501 (not implemented, by design) per point.'),
    serverErrors: Counts('5xx other than 501 per point.'),
    p50: Type.Array(Millis, { description: 'Median duration per point.' }),
    p99: Type.Array(Millis, { description: '99th percentile duration per point.' }),
    total: Type.Composite([Outcomes, Type.Object({ p50: Millis, p99: Millis })], { description: 'The whole window.' }),
  },
  { description: 'Requests by outcome over a window, as columns; exactly the figures of `keys usage`.' },
)

/** The windows a usage series is read over: hour and day by the minute, week by the hour. */
export const UsageWindow = Type.Union([Type.Literal('hour'), Type.Literal('day'), Type.Literal('week')], {
  default: 'day',
  description: 'hour and day by the minute, week by the hour.',
})
export type UsageWindow = Static<typeof UsageWindow>

const Ban = Type.Union([
  Type.Object({ kind: Type.Literal('key'), keyId: Type.String(), keyName: Type.String(), bannedUntil: Time('When the ban ends.') }),
  Type.Object({
    kind: Type.Literal('address'),
    address: Type.String({
      description: "A client address, an IPv6 client's /64, or `unknown` (clients a trusted proxy could not name).",
    }),
    bannedUntil: Time('When the ban ends.'),
  }),
])

const RecentRequest = Type.Object({
  time: Time('When the answer was given.'),
  method: Type.String(),
  path: Type.String({ description: 'The path, without its query.' }),
  status: Type.Integer(),
  keyId: Type.Union([Type.String(), Type.Null()]),
  keyName: Type.Union([Type.String(), Type.Null()]),
  client: Type.Union([Type.String(), Type.Null()], { description: "The client's address, for a request without a valid key." }),
  durationMs: Type.Number(),
  requestId: Type.String(),
})

const AuditEntry = Type.Object({
  at: Time('When it was done.'),
  actor: Type.String({
    description:
      "The operator; cli (USER) for the keys and operators commands, USER being the system account that ran them; cli (USER, first start) for the first start's key and operator.",
  }),
  action: Type.String({
    description: 'e.g. operator.sign-in, key.create, key.revoke, key.reset-limits, key.set-plan, ban.lift, operator.add.',
  }),
  target: Type.String({ description: 'What it was done to: a key id, an address, an operator; empty when nothing.' }),
})

const ErrorBody = Type.Object({
  code: Type.String(),
  message: Type.String({ description: 'What went wrong; a 400 names the field.' }),
  status: Type.Integer(),
})

const Overview = Type.Object({
  activeKeysToday: Type.Integer({ description: 'Keys with at least one request in the UTC day so far.' }),
  bansNow: Type.Integer({ description: 'Keys and client addresses banned now.' }),
  limiterAnswered: Type.Boolean({ description: 'false when the rate limiter did not answer: bansNow may then miss some.' }),
  hour: Series,
  day: Series,
  week: Series,
})

/** A key's refusals shown in its view: 429s, and 401s the buffer attributes to it. */
export const REFUSALS = [429, 401]
export const REFUSALS_SHOWN = 100

const KeyUsage = Type.Object({
  key: Type.Object({
    id: Type.String(),
    name: Type.String(),
    plan: Plan,
    today: Outcomes,
    lastUsedAt: NullableTime("The key's last request."),
    expiresAt: NullableTime('When the key expires; null: never.'),
    versions: Versions,
    deprecated: Type.Object({
      day: Count('getPet calls in the last 24 hours.'),
      week: Count('getPet calls in the last 7 days.'),
      last: NullableTime('Start of the minute (or hour, past a day) of the last getPet call.'),
    }),
  }),
  window: UsageWindow,
  series: Series,
  refusals: Type.Array(RecentRequest, {
    description: `The key's latest ${REFUSALS.join('s and ')}s, up to ${REFUSALS_SHOWN}, newest first, among the last 5,000 API answers this instance keeps.`,
  }),
})

const Deprecation = Type.Object({
  operation: Type.Literal(DEPRECATED_OPERATION),
  method: Type.Literal('GET'),
  path: Type.Literal('/pets/{petId}'),
  sunset: Time('When the operation is removed: the date of its Sunset header.'),
  daysLeft: Type.Integer({ description: 'Whole days from now to the sunset, rounded up.' }),
  callers: Type.Array(
    Type.Object({
      keyId: Type.String(),
      name: Type.String(),
      day: Count('Calls in the last 24 hours.'),
      week: Count('Calls in the last 7 days.'),
      lastCall: NullableTime('Start of the minute (or hour, past a day) of the last call.'),
    }),
    { description: 'Every key with a call in the last 7 days, most calls first.' },
  ),
})

const Operator = Type.Object({
  name: Type.String(),
  via: Type.Union([Type.Literal('session'), Type.Literal('token')]),
  idleMinutes: Type.Optional(Type.Integer({ description: 'On sign-in: the minutes without a request after which the session ends.' })),
})

const KeyList = Type.Object({
  keys: Type.Array(Key),
  limiterAnswered: Type.Boolean(),
  next: Type.Optional(
    Type.Union([Type.String(), Type.Null()], {
      description: 'With a limit: the cursor of the following page (null on the last page); absent without a limit.',
    }),
  ),
})
const CreatedKey = Type.Object({ key: Key, secret: Type.String({ description: "The key's secret, shown only in this answer." }) })
const RolledKey = Type.Object({
  id: Type.String(),
  secret: Type.String({ description: 'The new secret, shown only in this answer.' }),
  previousSecretEndsAt: Time('When the previous secret stops working.'),
})
const BanList = Type.Object({ bans: Type.Array(Ban), limiterAnswered: Type.Boolean() })
const RecentRequests = Type.Object({ requests: Type.Array(RecentRequest) })
const AuditLog = Type.Object({ entries: Type.Array(AuditEntry) })

/** The document's named schemas: what a route's detail refers to by name. */
export const SCHEMAS = {
  Outcomes,
  Series,
  Overview,
  KeyUsage,
  Deprecation,
  SignIn,
  NewKey: byPlan(
    NewKey,
    "A new key: free, pro or business with their plan's limits, or enterprise with its own rpm and rpd (both required).",
  ),
  PlanChange: byPlan(
    PlanChange,
    'A plan: free, pro or business with their limits, or enterprise with its own rpm and rpd (both required).',
  ),
  Roll,
  ExpiryChange,
  Key,
  Ban,
  RecentRequest,
  AuditEntry,
  Error: ErrorBody,
  Operator,
  KeyList,
  CreatedKey,
  RolledKey,
  BanList,
  RecentRequests,
  AuditLog,
} satisfies Record<string, TSchema>
export type SchemaName = keyof typeof SCHEMAS
/** What a named schema describes, as a type: `Model<'KeyList'>` is the body GET /api/keys answers. */
export type Model<N extends SchemaName> = Static<(typeof SCHEMAS)[N]>

/** The path parameters: a key id (checked by the guard before anything looks for it), a banned address. */
export const KeyParams = Type.Object({ id: Type.String({ description: "The key's id (key_...)." }) })
export const AddressParams = Type.Object({
  address: Type.String({
    description:
      'The address as the ban list gives it: an IPv4 address, an IPv6 address or its /64 (how an IPv6 client is banned), or `unknown`, URL-encoded.',
    anyOf: [{ format: 'ipv4' }, { format: 'ipv6' }, { pattern: '^[0-9A-Fa-f:]+/64$' }, { const: UNKNOWN_CLIENT }],
  }),
})

/** How many of the newest rows a list gives: `limit` of /api/requests and /api/audit. */
export const ListLimit = Type.Integer({ minimum: 1, maximum: 5_000, default: 200, description: 'How many of the newest to give.' })
export const RequestsQuery = Type.Object({
  key: Type.Optional(Type.String({ description: 'Only requests with this key id.' })),
  status: Type.Optional(Type.Integer({ minimum: 100, maximum: 599, description: 'Only answers with this status.' })),
  limit: Type.Optional(ListLimit),
})
export const AuditQuery = Type.Object({ limit: Type.Optional(ListLimit) })
/** Whether GET /api/keys lists revoked keys too (the CLI's keys list always does). */
export const RevokedKeys = Type.Union([Type.Literal('exclude'), Type.Literal('include')], {
  default: 'exclude',
  description: 'include: revoked keys too (with their revokedAt); exclude: the keys in use only.',
})
export type RevokedKeys = Static<typeof RevokedKeys>
/** A page of the key list: the keys in id order, at most `limit` of them, after `cursor`. */
export const KeysLimit = Type.Integer({
  minimum: 1,
  maximum: 5_000,
  description: "At most this many keys, in id order; the answer's next is the cursor of the following page. Without it, every key.",
})
export const KeysQuery = Type.Object({
  revoked: Type.Optional(RevokedKeys),
  limit: Type.Optional(KeysLimit),
  cursor: Type.Optional(Type.String({ description: "The next of the previous page's answer; with a limit only." })),
})
export const UsageQuery = Type.Object({ window: Type.Optional(UsageWindow) })
