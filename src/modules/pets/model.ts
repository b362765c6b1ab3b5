/**
 * The Pet Store schemas. The same objects validate requests (compiled once below) and are registered
 * with the app, so `/openapi.json` describes exactly what is enforced. They are plain TypeBox rather
 * than Elysia's `t` because `t.Integer` also accepts numeric strings, and the contract is strict.
 */
import { integerRule } from '../../domain/integer-range'
import { Type } from '@sinclair/typebox'
import { CONTROL_CHARACTERS, DEFAULT_STATUS, INT64_MAX, INT64_MIN, NAME_MAX, PET_STATUSES } from '../../domain/pet'
import { CURSOR_MAX_LENGTH, CURSOR_MIN_LENGTH, CURSOR_PATTERN } from './cursor'

export const LIMIT_MIN = 1
export const LIMIT_MAX = 100
export const LIMIT_DEFAULT = 20

/** PetStatus as the document's component: a plain string enum (the validator uses the union below). */
export const PetStatusSchema = { type: 'string', enum: [...PET_STATUSES], description: 'Availability of the animal.' }

const PetStatus = Type.Union(
  PET_STATUSES.map((status) => Type.Literal(status)),
  { description: 'Availability of the animal.' },
)

const Name = Type.String({
  minLength: 1,
  maxLength: NAME_MAX,
  pattern: `^[^${CONTROL_CHARACTERS}]*$`,
  description: `The animal's name: 1 to ${NAME_MAX} characters (code points), no control characters.`,
})

/**
 * Any int64, kept exactly. The document states int64's bounds (openapi.ts writes them as exact digits,
 * which a JS number cannot hold); the body reader hands the validator a bigint beyond 2^53.
 */
const CategoryId = Type.Integer({
  format: 'int64',
  description:
    `Identifier of the category: any int64 (${INT64_MIN} to ${INT64_MAX}), kept and answered exactly. ` +
    'Beyond ±9007199254740991 a JavaScript number would round it: read it from the text (see docs/clients.md).',
})

export const PetModel = {
  Pet: Type.Object(
    {
      id: Type.Integer({ format: 'int64', minimum: 1, description: 'Assigned by the service on creation.' }),
      name: Name,
      categoryId: CategoryId,
      status: Type.Optional(PetStatus),
    },
    // Examples let the docs page prefill bodies that the server accepts.
    { additionalProperties: false, examples: [{ id: 1, name: 'Rex', categoryId: 2, status: 'available' }] },
  ),
  NewPet: Type.Object(
    {
      name: Name,
      categoryId: CategoryId,
      status: Type.Optional({ ...PetStatus, default: DEFAULT_STATUS }),
    },
    { additionalProperties: false, examples: [{ name: 'Rex', categoryId: 2, status: 'available' }] },
  ),
  Error: Type.Object(
    {
      code: Type.String({ description: 'Machine-readable error code.' }),
      message: Type.String({ description: 'Human-readable description of the error.' }),
      status: Type.Integer({ description: 'The HTTP status code of the response.' }),
    },
    { additionalProperties: false },
  ),
  ListQuery: Type.Object({
    limit: Type.Optional(
      Type.Integer({
        minimum: LIMIT_MIN,
        maximum: LIMIT_MAX,
        default: LIMIT_DEFAULT,
        description: 'Maximum number of animals returned.',
        examples: [LIMIT_DEFAULT],
      }),
    ),
    // No examples for status and cursor: Swagger UI would send them as the values, so every Execute from
    // /docs would list only available pets, and any cursor skips pets.
    status: Type.Optional({ ...PetStatus, description: 'Filters by availability.' }),
    cursor: Type.Optional(
      Type.String({
        pattern: CURSOR_PATTERN,
        minLength: CURSOR_MIN_LENGTH,
        maxLength: CURSOR_MAX_LENGTH,
        description:
          'Opaque position of the next page; take it from the `Link: rel="next"` URL. Leave it out for the first page. ' +
          'Only a cursor this server issued is accepted: any other, even one that fits the pattern, is a 400.',
      }),
    ),
  }),
  PetParams: Type.Object({
    petId: Type.Integer({ format: 'int64', minimum: 1, description: 'Identifier of the animal.', examples: [1] }),
  }),
} as const

export const PetsModel = Type.Array(PetModel.Pet, { maxItems: LIMIT_MAX })

/**
 * NewPet as the validator checks it. JSON Schema counts `maxLength` in code points but TypeBox counts
 * UTF-16 units, so the compiled check allows the UTF-16 bound of 200 code points and the controller
 * counts code points itself; the published schema keeps `maxLength: 200`. A categoryId is checked as
 * the body reader holds it.
 */
export const NewPetCheck = Type.Object(
  {
    ...PetModel.NewPet.properties,
    name: { ...Name, maxLength: NAME_MAX * 2 },
    // The body reader gives a safe integer as a number and a larger one as a bigint; the controller
    // checks a bigint's range (TypeBox compiles bigint bounds through a double: 2^63 − 1 would be 2^63).
    categoryId: Type.Union([Type.Integer(), Type.BigInt()]),
  },
  { additionalProperties: false },
)

/** What each field must be, in the words a 400 uses. */
export const FIELD_RULES: Record<string, string> = {
  name: `must be a string of 1 to ${NAME_MAX} characters without control characters`,
  categoryId: `${integerRule(INT64_MIN, INT64_MAX)} (int64)`,
  status: `must be one of ${PET_STATUSES.join(', ')}`,
  limit: integerRule(LIMIT_MIN, LIMIT_MAX),
  petId: 'must be a positive 64-bit integer',
  cursor: 'is not a cursor this server issued; follow the Link rel="next" URL',
}
