/**
 * /openapi.json and /docs: the document describes every operation, status and header the service
 * sends, both servers and the bearer scheme, passes `redocly lint`, and matches what is really served;
 * the docs page loads only local assets.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { auth, postPet, startApp, type TestApp } from '../support/app'
import { Contract } from '../support/contract'
import Ajv2020 from 'ajv/dist/2020'
import addFormats from 'ajv-formats'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

type Json = Record<string, any>

let app: TestApp
let doc: Json
let raw: string
let reader: Contract

beforeAll(async () => {
  app = await startApp()
  const res = await fetch(`${app.origin}/openapi.json`)
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toStartWith('application/json')
  raw = await res.text()
  doc = JSON.parse(raw)
  reader = new Contract(doc)
})
afterAll(() => app.stop())

/** Follows local $refs until the object has none; an unresolved one fails the test. */
const resolve = (node: Json): Json => reader.resolve(node)

const OPERATIONS: [string, string, string, string[]][] = [
  ['/pets', 'get', 'listPets', ['200', '400', '401', '429']],
  ['/pets', 'post', 'createPet', ['201', '400', '401', '409', '413', '415', '429']],
  ['/pets/{petId}', 'get', 'getPet', ['200', '400', '401', '404', '429']],
  ['/store/orders', 'get', 'listOrders', ['401', '429', '501']],
]

function operation(path: string, method: string): Json {
  const op = doc.paths?.[path]?.[method]
  expect(op).toBeDefined()
  return op
}

function headersOf(path: string, method: string, status: string): string[] {
  const response = resolve(operation(path, method).responses[status])
  return Object.keys(response.headers ?? {}).map((h) => h.toLowerCase())
}

/** Values a schema allows as an enumeration (enum, or anyOf/oneOf of consts). */
function enumValues(schema: Json): unknown[] {
  const s = resolve(schema)
  if (Array.isArray(s.enum)) return s.enum
  const alternatives = s.anyOf ?? s.oneOf
  return alternatives ? alternatives.map((a: Json) => resolve(a).const) : []
}

describe('OpenAPI document', () => {
  test('is OpenAPI 3.1 at interface version 1.0.0', () => {
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/)
    expect(doc.info.version).toBe('1.0.0')
    expect(typeof doc.info.title).toBe('string')
  })

  test("says where each environment's first key is, so a staging reader does not take production's", () => {
    for (const text of [doc.info.description, doc.components.securitySchemes.bearerAuth.description])
      for (const file of ['`petstore-bootstrap-key.txt`', '`petstore-staging-bootstrap-key.txt`']) expect(text).toContain(file)
  })

  test('lists the production and staging base URLs as servers', () => {
    const port = new URL(app.origin).port
    expect(doc.servers).toHaveLength(3)
    // The first server is relative, so Swagger UI calls the origin that served the page.
    expect(doc.servers[0].url).toBe('/v1')
    const byDescription = Object.fromEntries(doc.servers.map((s: Json) => [s.description, s.url]))
    // The running environment's entry is its own base URL; the other is that environment's default.
    expect(byDescription.production).toBe(`http://localhost:${port}/v1`)
    expect(byDescription.staging).toBe('http://localhost:8081/v1')
    for (const server of doc.servers) expect(server.url).toMatch(/\/v1$/)
  })

  test('a staging server lists its own URL for staging and the production default', async () => {
    const staging = await startApp({ env: 'staging', baseUrl: 'https://staging.pets.example/v1' })
    try {
      const d = await jsonOf(await fetch(`${staging.origin}/openapi.json`))
      const byDescription = Object.fromEntries(d.servers.map((s: Json) => [s.description, s.url]))
      expect(byDescription).toEqual({
        'this server': '/v1',
        production: 'http://localhost:8080/v1',
        staging: 'https://staging.pets.example/v1',
      })
    } finally {
      staging.stop()
    }
  })

  test('no schema carries an $id (JSON Schema 2020-12 forbids pointer ids)', () => {
    expect(JSON.stringify(doc)).not.toContain('"$id"')
  })

  test('Pet and NewPet carry examples that their schemas accept, and Ajv 2020-12 compiles every schema', () => {
    const ajv = addFormats(new Ajv2020({ strict: false }))
    // The schemas refer to each other by `#/components/schemas/…`: they are compiled within the document.
    ajv.addSchema({ $id: 'openapi.json', components: { schemas: doc.components.schemas } })
    for (const [name, schema] of Object.entries<Json>(doc.components.schemas)) {
      const validate = ajv.compile({ $ref: `openapi.json#/components/schemas/${name}` })
      for (const example of schema.examples ?? []) expect(validate(example)).toBe(true)
      if (name === 'Pet' || name === 'NewPet') expect(schema.examples?.length).toBeGreaterThan(0)
    }
  })

  test('Pet, NewPet, Pets, PetStatus and Error are components referenced by $ref, with defaults and examples kept', () => {
    const schemas = doc.components.schemas
    expect(schemas.Pets.items).toEqual({ $ref: '#/components/schemas/Pet', type: 'object' })
    expect(schemas.PetStatus).toMatchObject({ type: 'string', enum: ['available', 'pending', 'sold'] })
    expect(schemas.Pet.properties.status).toEqual({ $ref: '#/components/schemas/PetStatus' })
    expect(schemas.NewPet.properties.status).toEqual({ $ref: '#/components/schemas/PetStatus', default: 'available' })
    for (const [path, method] of OPERATIONS) {
      // Swagger UI sends an example as the value: the cursor has none, since any cursor skips pets, the
      // status none, since every list would be filtered, Idempotency-Key none, since a sent key makes every
      // later Execute a replay (its example is in its words), and X-Request-Id none, since every Execute
      // would carry the same id.
      for (const parameter of operation(path, method).parameters ?? [])
        expect([parameter.name, parameter.example !== undefined]).toEqual([
          parameter.name,
          !['cursor', 'status', 'Idempotency-Key', 'X-Request-Id'].includes(parameter.name),
        ])
      for (const [status, response] of Object.entries<Json>(operation(path, method).responses)) {
        const media = resolve(response).content?.['application/json']
        if (Number(status) >= 400) {
          expect(resolve(media.schema)).toBe(resolve(schemas.Error))
          for (const example of Object.values<Json>(media.examples)) expect(resolve(example).value.status).toBe(Number(status))
        }
      }
    }
    // getPet's deprecation fields are on every answer it gives, so every response documents them.
    for (const response of Object.values<Json>(operation('/pets/{petId}', 'get').responses))
      for (const header of ['Deprecation', 'Sunset', 'Link']) expect(Object.keys(resolve(response).headers)).toContain(header)
  })

  test("the error examples are the server's own answers, with the settings it runs with", async () => {
    const banning = await startApp({ banAfter: '1', banSeconds: '60' })
    try {
      const examples = ((await (await fetch(`${banning.origin}/openapi.json`)).json()) as Json).components.examples
      expect(examples.key_banned.value).toEqual({
        code: 'key_banned',
        message: 'Banned for 60 s: more than 1 requests within a minute were sent before the time a 429 told them to wait for.',
        status: 429,
      })
      // What a request refused for lack of a key gets, word for word.
      const refused = await fetch(`${banning.base}/pets`)
      expect(examples.unauthorized.value).toEqual(await refused.json())
      // A key banned on this server says what its example says.
      const key = await banning.key('enterprise', { rpm: 1, rpd: 1000 })
      const answers = []
      for (let i = 0; i < 4; i++) answers.push(await (await fetch(`${banning.base}/pets`, { headers: auth(key) })).json())
      expect(answers.at(-1)).toEqual(examples.key_banned.value)
    } finally {
      await banning.stop()
    }
  })

  test('declares the HTTP bearer scheme and requires it for every operation', () => {
    const schemes = doc.components.securitySchemes
    const bearer = Object.entries(schemes).filter(([, s]: [string, any]) => s.type === 'http' && s.scheme === 'bearer')
    expect(bearer).toHaveLength(1)
    const name = bearer[0]![0]
    for (const [path, method] of OPERATIONS) {
      const security = operation(path, method).security ?? doc.security
      expect(security).toEqual(expect.arrayContaining([{ [name]: [] }]))
    }
  })

  test('describes exactly the operations of the interface, under paths relative to the base', () => {
    expect(Object.keys(doc.paths).sort()).toEqual(['/pets', '/pets/{petId}', '/store/orders'])
    const ids = Object.values(doc.paths).flatMap((item: any) => Object.values(item).map((op: any) => op.operationId))
    expect(ids.sort()).toEqual(['createPet', 'getPet', 'listOrders', 'listPets'])
  })

  for (const [path, method, operationId, statuses] of OPERATIONS) {
    test(`${operationId} (${method.toUpperCase()} ${path}) documents ${statuses.join(', ')}`, () => {
      const op = operation(path, method)
      expect(op.operationId).toBe(operationId)
      expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(statuses))
      for (const status of statuses) {
        const response = resolve(op.responses[status])
        expect(typeof response.description).toBe('string')
        // Every answer under the base carries the rate-limit fields.
        expect(headersOf(path, method, status)).toEqual(
          expect.arrayContaining(['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']),
        )
        for (const header of Object.values(response.headers ?? {})) {
          const h = resolve(header as Json)
          expect(h.schema).toBeDefined()
        }
        expect(response.content?.['application/json']?.schema).toBeDefined()
      }
      expect(headersOf(path, method, '429')).toContain('retry-after')
      expect(headersOf(path, method, '401')).toContain('www-authenticate')
    })
  }

  test('only getPet is deprecated', () => {
    expect(operation('/pets/{petId}', 'get').deprecated).toBe(true)
    expect(operation('/pets', 'get').deprecated ?? false).toBe(false)
    expect(operation('/pets', 'post').deprecated ?? false).toBe(false)
    expect(headersOf('/pets/{petId}', 'get', '200')).toEqual(expect.arrayContaining(['deprecation', 'sunset', 'link']))
  })

  test('listPets documents limit (1..100, default 20), status and the next-page Link', () => {
    const params = operation('/pets', 'get').parameters.map(resolve)
    const limit = params.find((p: Json) => p.name === 'limit')
    expect(limit).toMatchObject({ in: 'query', required: false })
    expect(limit.schema).toMatchObject({ type: 'integer', minimum: 1, maximum: 100, default: 20 })
    expect(resolve(operation('/pets', 'get').responses['200'].content['application/json'].schema).maxItems).toBe(100)
    const status = params.find((p: Json) => p.name === 'status')
    expect(status.in).toBe('query')
    expect(enumValues(status.schema).sort()).toEqual(['available', 'pending', 'sold'])
    expect(params.find((p: Json) => p.name === 'cursor')?.in).toBe('query')
    expect(headersOf('/pets', 'get', '200')).toContain('link')
    const body = resolve(resolve(operation('/pets', 'get').responses['200']).content['application/json'].schema)
    expect(body.type).toBe('array')
  })

  test('getPet documents petId as a required int64 integer path parameter', () => {
    const params = operation('/pets/{petId}', 'get').parameters.map(resolve)
    const petId = params.find((p: Json) => p.name === 'petId')
    expect(petId).toMatchObject({ in: 'path', required: true })
    expect(petId.schema).toMatchObject({ type: 'integer', format: 'int64' })
  })

  test("every int64 states int64's range in exact digits, not as a rounded double", () => {
    // The served text itself, as a client with an exact JSON reader sees it: both categoryIds take all
    // of int64; Pet.id and the petId parameter start at 1.
    const count = (text: string) => raw.split(text).length - 1
    expect(count('"minimum":-9223372036854775808,"maximum":9223372036854775807')).toBe(2)
    expect(count('"maximum":9223372036854775807')).toBe(4)
    expect(raw).not.toContain('922337203685477600')
    expect(doc.components.schemas.Pet.properties.id).toMatchObject({ minimum: 1, maximum: 2 ** 63 })
  })

  test('createPet documents a required NewPet body, Location on 201 and the Idempotency-Key header', () => {
    const op = operation('/pets', 'post')
    expect(op.requestBody.required).toBe(true)
    expect(Object.keys(op.requestBody.content)).toEqual(['application/json'])
    const newPet = resolve(op.requestBody.content['application/json'].schema)
    expect(newPet.required.sort()).toEqual(['categoryId', 'name'])
    expect(newPet.additionalProperties).toBe(false)
    expect(newPet.properties.categoryId).toMatchObject({ type: 'integer', format: 'int64' })
    expect(newPet.properties.categoryId.description).toContain('-9223372036854775808 to 9223372036854775807')
    expect(newPet.properties.name).toMatchObject({ type: 'string', minLength: 1, maxLength: 200 })
    expect(enumValues(newPet.properties.status).sort()).toEqual(['available', 'pending', 'sold'])
    expect(newPet.properties.id).toBeUndefined()
    expect(headersOf('/pets', 'post', '201')).toContain('location')
    const idem = op.parameters.map(resolve).find((p: Json) => p.name === 'Idempotency-Key')
    expect(idem).toMatchObject({ in: 'header', required: false })
  })

  test('the Pet and Error schemas match the interface', () => {
    const pet = resolve({ $ref: '#/components/schemas/Pet' })
    expect(pet.required.sort()).toEqual(['categoryId', 'id', 'name'])
    expect(pet.properties.id).toMatchObject({ type: 'integer', format: 'int64' })
    const error = resolve(resolve(operation('/pets', 'get').responses['400']).content['application/json'].schema)
    expect(error.required.sort()).toEqual(['code', 'message', 'status'])
    expect(error.properties.status.type).toBe('integer')
  })

  test('real responses validate against the documented schemas, headers included', async () => {
    const key = await app.key('enterprise', { rpm: 10_000, rpd: 100_000 })
    const contract = new Contract(doc)
    const call = async (method: string, path: string, init: RequestInit = {}) => {
      const response = await fetch(`${app.base}${path}`, { method, ...init })
      contract.check(method, new URL(response.url).pathname, response, await response.text())
      return response
    }
    const created = await postPet(app.base, key, { name: 'Rex', categoryId: 9007199254740991, status: 'sold' })
    const createdText = await created.text()
    contract.check('POST', '/v1/pets', created, createdText)
    const pet = JSON.parse(createdText)
    await call('GET', '/pets', { headers: auth(key) })
    await call('GET', '/pets?limit=1', { headers: auth(key) })
    await call('GET', `/pets/${pet.id}`, { headers: auth(key) })
    await call('GET', '/pets/999999', { headers: auth(key) })
    await call('GET', '/pets?limit=0', { headers: auth(key) })
    await call('GET', '/pets')
    await call('POST', '/pets', { headers: { ...auth(key), 'content-type': 'text/plain' }, body: 'x' })
    await call('GET', '/store/orders', { headers: auth(key) })
    expect(contract.checked).toBe(9)
    // And the documented request schema refuses what the server refuses.
    const newPet = operation('/pets', 'post').requestBody.content['application/json'].schema
    const accepts = (value: unknown) => contract.accepts(newPet, value)
    expect(accepts({ name: 'x', categoryId: 1, id: 3 })).toBe(false)
    expect(accepts({ name: '', categoryId: 1 })).toBe(false)
    expect(accepts({ name: 'x', categoryId: 9007199254740992 })).toBe(true)
    expect(accepts({ name: 'x', categoryId: 2 ** 64 })).toBe(false)
    expect(accepts({ name: 'x', categoryId: 1 })).toBe(true)
  })

  test('the contract check catches an answer that strays from the document', async () => {
    const contract = new Contract(doc)
    const key = await app.key('free')
    const good = await fetch(`${app.base}/pets`, { headers: auth(key) })
    const body = await good.text()
    const headers = (change: (h: Headers) => void) => {
      const h = new Headers(good.headers)
      change(h)
      return h
    }
    expect(() => contract.check('GET', '/v1/pets', good, body)).not.toThrow()
    expect(() => contract.check('GET', '/v1/pets', { status: 418, headers: good.headers }, body)).toThrow(/not documented/)
    expect(() =>
      contract.check('GET', '/v1/pets', { status: 200, headers: headers((h) => h.delete('x-ratelimit-remaining')) }, body),
    ).toThrow(/required header X-RateLimit-Remaining/)
    expect(() =>
      contract.check('GET', '/v1/pets', { status: 200, headers: headers((h) => h.set('x-ratelimit-limit', 'many')) }, body),
    ).toThrow(/X-RateLimit-Limit/)
    expect(() =>
      contract.check('GET', '/v1/pets', { status: 200, headers: headers((h) => h.set('content-type', 'text/html')) }, body),
    ).toThrow(/content-type/)
    expect(() => contract.check('GET', '/v1/pets', good, '[{"id":1}]')).toThrow(/schema/)
    expect(() => contract.check('GET', '/v1/pets', { status: 400, headers: good.headers }, '{"code":"x","message":"y"}')).toThrow(/schema/)
    expect(() => contract.check('DELETE', '/v1/pets', good, body)).toThrow(/not a documented operation/)
  })

  test('contains no secret and no key id', async () => {
    const key = await app.key('free')
    expect(raw).not.toContain(key.slice(4))
    expect(raw).not.toMatch(/psk_[A-Za-z0-9_-]{10}/)
  })

  test('passes redocly lint with no errors', () => {
    const dir = mkdtempSync(join(tmpdir(), 'petstore-openapi-'))
    try {
      const file = join(dir, 'openapi.json')
      writeFileSync(file, raw)
      const result = Bun.spawnSync([join(import.meta.dir, '..', '..', 'node_modules', '.bin', 'redocly'), 'lint', file], {
        env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
        stdout: 'pipe',
        stderr: 'pipe',
      })
      const output = result.stdout.toString() + result.stderr.toString()
      expect(output).not.toMatch(/Error was generated|\b[1-9]\d* errors?\b/)
      expect(output).toMatch(/valid/)
      expect(result.exitCode).toBe(0)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 30_000)
})

describe('/docs', () => {
  test('returns HTML that loads only local script and stylesheet assets, all answering 200', async () => {
    const res = await fetch(`${app.origin}/docs`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/html')
    const html = await res.text()
    expect(html).not.toMatch(/https?:\/\//)
    expect(html).not.toMatch(/(src|href)\s*=\s*["']\/\//)
    const urls = [...html.matchAll(/(?:src|href)\s*=\s*["']([^"']+)["']/g)].map((m) => m[1]!)
    const scripts = [...html.matchAll(/<script[^>]+src\s*=\s*["']([^"']+)["']/g)].map((m) => m[1]!)
    const styles = [...html.matchAll(/<link[^>]+href\s*=\s*["']([^"']+)["']/g)].map((m) => m[1]!)
    expect(scripts.length).toBeGreaterThan(0)
    expect(styles.length).toBeGreaterThan(0)
    for (const url of urls) {
      expect(url).toMatch(/^\/docs\//)
      const asset = await fetch(`${app.origin}${url}`)
      expect(asset.status).toBe(200)
      expect((await asset.arrayBuffer()).byteLength).toBeGreaterThan(1000)
    }
    for (const url of scripts) {
      const asset = await fetch(`${app.origin}${url}`)
      expect(asset.headers.get('content-type')).toMatch(/javascript/)
    }
    for (const url of styles) {
      const asset = await fetch(`${app.origin}${url}`)
      expect(asset.headers.get('content-type')).toMatch(/text\/css/)
    }
    // The page points the UI at the local document.
    expect(html).toContain('/openapi.json')
  })

  test('may not be framed by another site (clickjacking): X-Frame-Options DENY and CSP frame-ancestors none', async () => {
    const res = await fetch(`${app.origin}/docs`)
    expect(res.status).toBe(200)
    expect(res.headers.get('x-frame-options')).toBe('DENY')
    expect(res.headers.get('content-security-policy')).toBe("frame-ancestors 'none'")
  })
})

describe('what an outside fuzzer reads from the document', () => {
  // The document as served, fetched afresh (the tests above read theirs through the contract checker).
  const listParameter = (document: Json, name: string): Json => document.paths['/pets'].get.parameters.find((p: Json) => p.name === name)

  test('cursor: the pattern of the cursors the server issues; one that fits it but was not issued is a 400', async () => {
    const { schema, description } = listParameter(await jsonOf(await fetch(`${app.origin}/openapi.json`)), 'cursor')
    expect([schema.type, typeof schema.pattern, typeof schema.minLength, typeof schema.maxLength]).toEqual([
      'string',
      'string',
      'number',
      'number',
    ])
    expect(description).toContain('Only a cursor this server issued is accepted')
    const pattern = new RegExp(schema.pattern)
    const key = await app.key('pro')
    for (const name of ['a', 'b']) expect((await postPet(app.base, key, { name, categoryId: 1 })).status).toBe(201)
    const page = await fetch(`${app.base}/pets?limit=1`, { headers: auth(key) })
    const issued = new URL(/<([^>]+)>; rel="next"/.exec(page.headers.get('link') ?? '')![1]!, app.origin).searchParams.get('cursor')!
    expect(issued).toMatch(pattern)
    expect(issued.length).toBeGreaterThanOrEqual(schema.minLength)
    expect(issued.length).toBeLessThanOrEqual(schema.maxLength)
    // Fitting the pattern is not enough (the document says so): an id no cursor was made from.
    const forged = `${issued.slice(0, 4)}AAAA`
    expect(forged).toMatch(pattern)
    const refused = await fetch(`${app.base}/pets?cursor=${forged}`, { headers: auth(key) })
    expect(refused.status).toBe(400)
    expect((await jsonOf(refused)).message).toStartWith('cursor: ')
  })

  test('Prefer (staging): a value that is not an RFC 7240 list is a 400, as the parameter says', async () => {
    const staging = await startApp({ env: 'staging' })
    try {
      const document = await jsonOf(await fetch(`${staging.origin}/openapi.json`))
      const prefer = listParameter(document, 'Prefer')
      expect(prefer.description).toContain('a value that is not a list of preferences as RFC 7240 writes them')
      expect(prefer.description).toContain('is a 400')
      expect(Object.keys(document.paths['/pets'].get.responses)).toContain('400')
      const answer = await fetch(`${staging.base}/pets`, { headers: auth(await staging.key('pro'), { prefer: '=503' }) })
      expect(answer.status).toBe(400)
      expect((await jsonOf(answer)).message).toBe('Prefer: is not a list of preferences as RFC 7240 writes them (at character 1)')
    } finally {
      staging.stop()
    }
  })

  test("a header with a control byte: the 400 answer says the HTTP parser's bare 400 comes before the server's code, and it does", async () => {
    const badRequest = (await jsonOf(await fetch(`${app.origin}/openapi.json`))).components.responses.BadRequest
    expect(badRequest.description).toContain('a header with a control character')
    expect(badRequest.description).toContain('a bare 400 with `Connection: close` and nothing else, no body')
    const { connect } = await import('node:net')
    const { port } = new URL(app.origin)
    const raw = await new Promise<string>((done, fail) => {
      const socket = connect(Number(port), '127.0.0.1', () =>
        socket.write(`GET ${new URL(app.base).pathname}/pets HTTP/1.1\r\nHost: localhost\r\nX-Fuzz: a\x01b\r\n\r\n`),
      )
      let text = ''
      socket.on('data', (chunk) => {
        text += chunk.toString('latin1')
      })
      socket.on('end', () => done(text))
      socket.on('error', fail)
    })
    const [head, body] = raw.split('\r\n\r\n')
    expect(head!.split('\r\n')[0]).toBe('HTTP/1.1 400 Bad Request')
    expect(body).toBe('')
    expect(head!.toLowerCase()).not.toContain('x-ratelimit')
    expect(head!.toLowerCase()).not.toContain('x-request-id')
  })
})
