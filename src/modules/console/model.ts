/**
 * The console API's schemas: the same TypeBox objects validate request bodies and describe the API in
 * the console's own OpenAPI document (GET /api/openapi.json on the console listener).
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox'
import { PLANS } from '../../domain/plans'

const Plan = Type.Union(
  PLANS.map((plan) => Type.Literal(plan)),
  { description: 'free, pro and business carry their plan\'s limits; enterprise carries its own rpm and rpd.' },
)
const Limit = (what: string) => Type.Integer({ minimum: 1, maximum: 1_000_000_000, description: `${what}, for the enterprise plan only.` })
const Time = (description: string) => Type.String({ format: 'date-time', description })
const NullableTime = (description: string) => Type.Union([Time(description), Type.Null()], { description })

export const SignIn = Type.Object(
  {
    name: Type.String({ description: 'The operator\'s name.' }),
    password: Type.String({ description: 'The operator\'s password.' }),
  },
  { additionalProperties: false },
)
export type SignIn = Static<typeof SignIn>

export const NewKey = Type.Object(
  {
    plan: Plan,
    name: Type.Optional(Type.String({ maxLength: 200, description: 'A name to tell the key by (at most 200 characters).' })),
    rpm: Type.Optional(Limit('Requests per minute')),
    rpd: Type.Optional(Limit('Requests per day')),
  },
  { additionalProperties: false },
)
export type NewKey = Static<typeof NewKey>

export const PlanChange = Type.Object(
  { plan: Plan, rpm: Type.Optional(Limit('Requests per minute')), rpd: Type.Optional(Limit('Requests per day')) },
  { additionalProperties: false },
)
export type PlanChange = Static<typeof PlanChange>

/** What each field must be, for the 400 that names it. */
export const FIELD_RULES: Record<string, string> = {
  name: 'must be a string (a key name: at most 200 characters)',
  password: 'must be a string',
  plan: `must be one of ${PLANS.join(', ')}`,
  rpm: 'must be an integer from 1 to 1000000000',
  rpd: 'must be an integer from 1 to 1000000000',
}

const Key = Type.Object({
  id: Type.String(),
  name: Type.String(),
  plan: Plan,
  rpm: Type.Integer({ description: 'Requests per minute.' }),
  rpd: Type.Integer({ description: 'Requests per day.' }),
  createdAt: Time('When the key was made.'),
  lastUsedAt: NullableTime('Last request with the key, saved every few seconds.'),
  revokedAt: NullableTime('When the key was revoked.'),
  dayQuotaLeft: Type.Union([Type.Integer(), Type.Null()], {
    description: 'Requests left in the day bucket now, as the limiter holds it (read without taking a token); null for a revoked key or when the limiter does not answer.',
  }),
  bannedUntil: NullableTime('When the key\'s ban ends; null when it is not banned.'),
})

const Ban = Type.Object({
  kind: Type.Union([Type.Literal('key'), Type.Literal('address')]),
  keyId: Type.Optional(Type.String()),
  keyName: Type.Optional(Type.String()),
  address: Type.Optional(Type.String()),
  bannedUntil: Time('When the ban ends.'),
})

const RecentRequest = Type.Object({
  time: Time('When the answer was given.'),
  method: Type.String(),
  path: Type.String({ description: 'The path, without its query.' }),
  status: Type.Integer(),
  keyId: Type.Union([Type.String(), Type.Null()]),
  keyName: Type.Union([Type.String(), Type.Null()]),
  client: Type.Union([Type.String(), Type.Null()], { description: 'The client\'s address, for a request without a valid key.' }),
  durationMs: Type.Number(),
  requestId: Type.String(),
})

const AuditEntry = Type.Object({
  at: Time('When it was done.'),
  actor: Type.String({ description: 'The operator, or (command line) for the operators command.' }),
  action: Type.String({ description: 'e.g. operator.sign-in, key.create, key.revoke, key.reset-limits, key.set-plan, ban.lift.' }),
  target: Type.String({ description: 'What it was done to: a key id, an address, an operator; empty when nothing.' }),
})

const Error = Type.Object({
  code: Type.String(),
  message: Type.String({ description: 'What went wrong; a 400 names the field.' }),
  status: Type.Integer(),
})

export const SCHEMAS: Record<string, TSchema> = {
  SignIn,
  NewKey,
  PlanChange,
  Key,
  Ban,
  RecentRequest,
  AuditEntry,
  Error,
  Operator: Type.Object({ name: Type.String(), via: Type.Union([Type.Literal('session'), Type.Literal('token')]) }),
  KeyList: Type.Object({ keys: Type.Array(Key), limiterAnswered: Type.Boolean() }),
  CreatedKey: Type.Object({ key: Key, secret: Type.String({ description: 'The key\'s secret, shown only in this answer.' }) }),
  BanList: Type.Object({ bans: Type.Array(Ban), limiterAnswered: Type.Boolean() }),
  RecentRequests: Type.Object({ requests: Type.Array(RecentRequest) }),
  AuditLog: Type.Object({ entries: Type.Array(AuditEntry) }),
}
