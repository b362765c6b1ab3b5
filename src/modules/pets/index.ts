/**
 * The pets controller: listPets, createPet and the deprecated getPet, with strict parsing of every
 * query, path and body value before the service sees it.
 */
import { Elysia } from 'elysia'
import { badRequest, ClientClosedError, JSON_TYPE, petNotFound } from '../../http/api-errors'
import { readJsonBody } from '../../http/json-body'
import { DEPRECATION_HEADERS, errorResponses, jsonResponse, parametersFrom, schemaRef } from '../../http/openapi'
import { strictQuery } from '../../http/query'
import { compileValidator } from '../../http/validation'
import { waitedWhereNothingWaits } from '../../domain/at-once'
import { type RequestInfo, requestInfo, verifiedKey } from '../../plugins/request-info'
import { DEPRECATED_OPERATION, DEPRECATED_SINCE, SUNSET, SUNSET_DAY } from '../../domain/deprecation'
import { IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_RULE, IDEMPOTENCY_TTL_MS } from '../../domain/idempotency'
import { HOUR_MS } from '../../domain/time'
import { DEFAULT_STATUS, INT64_MAX, INT64_MIN, NAME_MAX, type NewPet, type PetStatus } from '../../domain/pet'
import { decodeCursor, encodeCursor } from './cursor'
import { FIELD_RULES, LIMIT_DEFAULT, NewPetCheck, PetModel, PetsModel } from './model'
import type { ListQuery, Page, PetService } from './service'
import type { MaybePromise } from '../../domain/repositories'

export interface PetsModuleOptions {
  service: PetService
  /** The API's absolute base URL, for links. */
  baseUrl: string
  maxBodyBytes: number
  onDeprecatedCall: (keyId: string) => void
  /** True when storage answers at once (the data file): the reads' handlers are then declared so (domain/at-once.ts). */
  answersAtOnce: boolean
}

const newPetValidator = compileValidator(NewPetCheck, FIELD_RULES)
const listQueryValidator = compileValidator(PetModel.ListQuery, FIELD_RULES, 'query')
const LIST_PARAMETERS = Object.keys(PetModel.ListQuery.properties)

const parsedQueries = new Map<string, ListQuery>()
/** Far above any query this operation takes (three short parameters); keeps the parse cache small. */
const MAX_QUERY_LENGTH = 1024

/** Parses the query of a listPets URL; results are kept by query text, since clients repeat them. */
export function parseListQuery(url: string): ListQuery {
  const start = url.indexOf('?')
  const text = start < 0 ? '' : url.slice(start + 1)
  if (text.length > MAX_QUERY_LENGTH) throw badRequest(`query: is longer than ${MAX_QUERY_LENGTH} characters`)
  let parsed = parsedQueries.get(text)
  if (!parsed) {
    parsed = parseQueryText(text)
    if (parsedQueries.size >= 10_000) parsedQueries.clear()
    parsedQueries.set(text, parsed)
  }
  return parsed
}

function parseQueryText(text: string): ListQuery {
  const query: { limit?: number; status?: string; cursor?: string } = {}
  if (text) {
    strictQuery(new URLSearchParams(text), LIST_PARAMETERS, (name, value) => {
      if (name === 'limit') {
        if (!/^\d{1,6}$/.test(value)) throw badRequest(`limit: ${FIELD_RULES.limit}`)
        query.limit = Number(value)
      } else query[name as 'status' | 'cursor'] = value
    })
  }
  listQueryValidator.parse(query)
  const afterId = query.cursor === undefined ? 0 : decodeCursor(query.cursor)
  if (afterId === null) throw badRequest(`cursor: ${FIELD_RULES.cursor}`)
  return { limit: query.limit ?? LIMIT_DEFAULT, status: query.status as PetStatus | undefined, afterId }
}

/** A petId as a number: 400 unless a positive int64; ids beyond 2^53 are valid but never assigned. */
export function parsePetId(text: string): number {
  // Only a 19-digit id can pass 2^63 - 1, so only such an id costs a BigInt.
  if (!/^[1-9]\d{0,18}$/.test(text) || (text.length === 19 && BigInt(text) > INT64_MAX)) throw badRequest(`petId: ${FIELD_RULES.petId}`)
  return Number(text)
}

function parseNewPet(body: unknown): NewPet {
  const input = newPetValidator.parse(body)
  if (input.name.length > NAME_MAX && [...input.name].length > NAME_MAX) throw badRequest(`name: ${FIELD_RULES.name}`)
  const categoryId = BigInt(input.categoryId)
  if (categoryId < INT64_MIN || categoryId > INT64_MAX) throw badRequest(`categoryId: ${FIELD_RULES.categoryId}`)
  return { name: input.name, categoryId, status: input.status ?? DEFAULT_STATUS }
}

function nextLink(baseUrl: string, query: ListQuery, afterId: number): string {
  const status = query.status ? `&status=${query.status}` : ''
  return `<${baseUrl}/pets?limit=${query.limit}${status}&cursor=${encodeCursor(afterId)}>; rel="next"`
}

type Answer = { set: { headers: Record<string, unknown> }; info: RequestInfo }

export function petsModule(options: PetsModuleOptions) {
  const { service, baseUrl, maxBodyBytes, onDeprecatedCall, answersAtOnce } = options
  /** Sets the answer's fields, and gives its body. */
  const answerList = (set: Answer['set'], query: ListQuery, page: Page): string => {
    set.headers['content-type'] = JSON_TYPE
    if (page.nextAfterId !== null) set.headers.link = page.link ??= nextLink(baseUrl, query, page.nextAfterId)
    return page.body
  }
  const answerPet = (set: Answer['set'], petId: string, json: string | null): string => {
    if (json === null) throw petNotFound(petId)
    set.headers['content-type'] = JSON_TYPE
    return json
  }
  /**
   * Deprecation fields for every answer of getPet, 401 and 429 included: a transform hook runs before
   * the gate's beforeHandle.
   */
  const successor = `<${baseUrl}/pets>; rel="successor-version"`
  const deprecationHeaders = ({ set }: { set: { headers: Record<string, unknown> } }) => {
    set.headers.deprecation = DEPRECATED_SINCE
    set.headers.sunset = SUNSET
    set.headers.link = successor
  }
  /** The list's body, its fields set; a promise only while storage is read. */
  const list = (request: Request, set: Answer['set']): MaybePromise<string> => {
    const query = parseListQuery(request.url)
    const page = service.list(query)
    return page instanceof Promise ? page.then((read) => answerList(set, query, read)) : answerList(set, query, page)
  }
  /** The pet's JSON, its fields set; a promise only while storage is read. */
  const pet = (petId: string, set: Answer['set'], info: RequestInfo): MaybePromise<string> => {
    onDeprecatedCall(verifiedKey(info).id)
    const json = service.getJson(parsePetId(petId))
    return json instanceof Promise ? json.then((read) => answerPet(set, petId, read)) : answerPet(set, petId, json)
  }
  // Declared to answer at once where storage does (domain/at-once.ts), else awaited. The context is
  // destructured, since Elysia reads a handler's source text to decide which context fields to build:
  // hence each form written out, where one wrapper taking the whole context would make it build all of it.
  const listPets = answersAtOnce
    ? function listPets({ request, set }: Pick<Answer, 'set'> & { request: Request }) {
        const body = list(request, set)
        if (body instanceof Promise) throw waitedWhereNothingWaits('listPets', body)
        return body
      }
    : async function listPets({ request, set }: Pick<Answer, 'set'> & { request: Request }) {
        return await list(request, set)
      }
  const getPet = answersAtOnce
    ? function getPet({ params, set, info }: Answer & { params: { petId: string } }) {
        const body = pet(params.petId, set, info)
        if (body instanceof Promise) throw waitedWhereNothingWaits('getPet', body)
        return body
      }
    : async function getPet({ params, set, info }: Answer & { params: { petId: string } }) {
        return await pet(params.petId, set, info)
      }
  return new Elysia({ name: 'pets' })
    .use(requestInfo)
    .model({ Pet: PetModel.Pet, NewPet: PetModel.NewPet, Pets: PetsModel, Error: PetModel.Error })
    .get('/pets', listPets, {
      detail: {
        operationId: 'listPets',
        summary: 'List pets',
        description: 'Pets in id order. When more match, `Link: <…&cursor=…>; rel="next"` gives the next page (keyset pagination).',
        tags: ['pets'],
        parameters: parametersFrom(PetModel.ListQuery, 'query'),
        responses: {
          200: jsonResponse('A page of pets.', schemaRef('Pets'), ['Link']),
          ...errorResponses([400, 401, 429, 500, 503]),
        },
      },
    })
    .post(
      '/pets',
      async ({ request, info, set }) => {
        const idempotencyKey = request.headers.get('idempotency-key')
        if (idempotencyKey !== null && !IDEMPOTENCY_KEY.test(idempotencyKey)) throw badRequest(`Idempotency-Key: ${IDEMPOTENCY_KEY_RULE}`)
        const pet = parseNewPet(await readJsonBody(request, maxBodyBytes))
        const created = await service.create(
          pet,
          idempotencyKey === null ? undefined : { keyId: verifiedKey(info).id, key: idempotencyKey },
          request.signal,
        )
        // Gone while the batch was committed: the pet exists (a retry with the Idempotency-Key finds it),
        // but no 201 was delivered, so none is recorded.
        if (request.signal.aborted) throw new ClientClosedError()
        set.status = 201
        set.headers['content-type'] = JSON_TYPE
        set.headers.location = created.location
        if (created.replayed) set.headers['idempotent-replayed'] = 'true'
        return created.body
      },
      {
        parse: 'none',
        detail: {
          operationId: 'createPet',
          summary: 'Add a pet',
          description: `Unknown properties are refused. Send \`Idempotency-Key\` to retry safely: the same key and body replay the first answer (kept ${IDEMPOTENCY_TTL_MS / HOUR_MS} h).`,
          tags: ['pets'],
          parameters: [
            {
              name: 'Idempotency-Key',
              in: 'header',
              required: false,
              // No `example`: Swagger UI sends a parameter's example as its value, so every Execute
              // from /docs would replay the first pet. The pattern is the rule the server applies.
              description: `Client-chosen key, scoped to the API key: it ${IDEMPOTENCY_KEY_RULE} (anything else is a 400); for example \`order-1234-create\`.`,
              schema: { type: 'string', pattern: IDEMPOTENCY_KEY.source },
            },
          ],
          requestBody: { required: true, content: { 'application/json': { schema: schemaRef('NewPet') } } },
          responses: {
            201: jsonResponse('The created pet.', schemaRef('Pet'), ['Location', 'Idempotent-Replayed']),
            ...errorResponses([400, 401, 408, 409, 413, 415, 429, 500, 503]),
          },
        },
      },
    )
    .get('/pets/:petId', getPet, {
      transform: deprecationHeaders,
      detail: {
        operationId: DEPRECATED_OPERATION,
        summary: 'Get one pet (deprecated)',
        description: `Deprecated; removed on ${SUNSET_DAY}. Use \`GET /pets\` with the \`status\` filter.`,
        deprecated: true,
        tags: ['pets'],
        parameters: parametersFrom(PetModel.PetParams, 'path'),
        responses: {
          200: jsonResponse('The pet.', schemaRef('Pet'), DEPRECATION_HEADERS),
          ...errorResponses([400, 401, 404, 429, 500, 503], DEPRECATION_HEADERS),
        },
      },
    })
}
