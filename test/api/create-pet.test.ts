/**
 * POST /pets over real HTTP: 201 with Location, defaults, strict validation of every field, int64
 * edges that must never be rounded, media type, size and JSON errors. Every 201 reads back identical.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { encodeCursor } from '../../src/modules/pets/cursor'
import { auth, postPet, startApp, type TestApp } from '../support/app'

/** A response body as loosely typed JSON (the DOM typings say unknown). */
const jsonOf = (res: Response): Promise<any> => res.json()

const UNLIMITED = { rpm: 1_000_000, rpd: 100_000_000 }
const BASE_URL = 'https://pets.example.test/v1'

let app: TestApp
let key: string

beforeAll(async () => {
  // An explicit base URL: Location must use it, not the socket address.
  app = await startApp({ baseUrl: BASE_URL })
  key = await app.key('enterprise', UNLIMITED)
})
afterAll(() => app.stop())

/** POSTs a raw JSON text. */
function postRaw(text: string | Uint8Array, headers: Record<string, string> = { 'content-type': 'application/json' }) {
  return fetch(`${app.base}/pets`, { method: 'POST', headers: { ...auth(key), ...headers }, body: text })
}

async function expectCreated(res: Response) {
  expect(res.status).toBe(201)
  const text = await res.text()
  const pet = JSON.parse(text)
  expect(res.headers.get('location')).toBe(`${BASE_URL}/pets/${pet.id}`)
  // Readable back, byte for byte.
  const read = await fetch(`${app.base}/pets/${pet.id}`, { headers: auth(key) })
  expect(read.status).toBe(200)
  expect(await read.text()).toBe(text)
  return { pet, text }
}

async function expect400(res: Response, field: string, also?: RegExp) {
  expect(res.status).toBe(400)
  expect(res.headers.get('content-type')).toStartWith('application/json')
  const body = await jsonOf(res)
  expect(body).toEqual({ code: 'invalid_request', message: expect.any(String), status: 400 })
  expect(body.message).toContain(field)
  if (also) expect(body.message).toMatch(also)
  return body
}

describe('POST /pets success', () => {
  test('answers 201 with Location BASE/pets/{id} and the pet with its id', async () => {
    const res = await postPet(app.base, key, { name: 'Rex', categoryId: 7, status: 'pending' })
    const { pet } = await expectCreated(res)
    expect(pet).toEqual({ id: expect.any(Number), name: 'Rex', categoryId: 7, status: 'pending' })
    expect(Number.isInteger(pet.id) && pet.id >= 1).toBe(true)
    expect(res.headers.get('content-type')).toStartWith('application/json')
  })

  test('status defaults to available', async () => {
    const { pet } = await expectCreated(await postPet(app.base, key, { name: 'Tom', categoryId: 1 }))
    expect(pet.status).toBe('available')
  })

  test('each status value is accepted and kept', async () => {
    for (const status of ['available', 'pending', 'sold']) {
      const { pet } = await expectCreated(await postPet(app.base, key, { name: 's', categoryId: 1, status }))
      expect(pet.status).toBe(status)
    }
  })

  test('ids are assigned uniquely and increase', async () => {
    const a = (await expectCreated(await postPet(app.base, key, { name: 'a', categoryId: 1 }))).pet
    const b = (await expectCreated(await postPet(app.base, key, { name: 'b', categoryId: 1 }))).pet
    expect(b.id).toBeGreaterThan(a.id)
  })

  test('concurrent creates all succeed with distinct ids, each readable back', async () => {
    const responses = await Promise.all(Array.from({ length: 40 }, (_, i) => postPet(app.base, key, { name: `c${i}`, categoryId: i })))
    const pets = await Promise.all(responses.map(async (res) => (await expectCreated(res)).pet))
    expect(new Set(pets.map((p) => p.id)).size).toBe(40)
    expect(pets.map((p) => p.name).sort()).toEqual(Array.from({ length: 40 }, (_, i) => `c${i}`).sort())
  })

  test('name of exactly 200 characters is accepted', async () => {
    const name = 'n'.repeat(200)
    const { pet } = await expectCreated(await postPet(app.base, key, { name, categoryId: 1 }))
    expect(pet.name).toBe(name)
  })

  test('non-ASCII names round-trip exactly', async () => {
    const name = 'Zoë 🐕 “Ålborg” \\ "quoted" </script>'
    const { pet } = await expectCreated(await postPet(app.base, key, { name, categoryId: 1 }))
    expect(pet.name).toBe(name)
  })

  test('a name of 200 non-BMP characters (e.g. emoji) is accepted: length counts characters', async () => {
    // JSON Schema's maxLength (and the OpenAPI document) count Unicode characters, not UTF-16 units.
    const name = '🐕'.repeat(200)
    const { pet } = await expectCreated(await postPet(app.base, key, { name, categoryId: 1 }))
    expect(pet.name).toBe(name)
  })

  test('content type with charset parameter is accepted', async () => {
    await expectCreated(await postRaw('{"name":"c","categoryId":1}', { 'content-type': 'application/json; charset=utf-8' }))
  })

  test('whitespace around the JSON document is fine', async () => {
    await expectCreated(await postRaw(' \n {"name":"w","categoryId":2} \n'))
  })
})

describe('POST /pets categoryId int64 edges', () => {
  test('9007199254740991 round-trips exactly', async () => {
    const { text, pet } = await expectCreated(await postRaw('{"name":"max","categoryId":9007199254740991}'))
    expect(text).toContain('"categoryId":9007199254740991')
    expect(pet.categoryId).toBe(9007199254740991)
  })

  test('-9007199254740991 round-trips exactly', async () => {
    const { text } = await expectCreated(await postRaw('{"name":"min","categoryId":-9007199254740991}'))
    expect(text).toContain('"categoryId":-9007199254740991')
  })

  test('0 is a valid categoryId', async () => {
    const { pet } = await expectCreated(await postRaw('{"name":"zero","categoryId":0}'))
    expect(pet.categoryId).toBe(0)
  })

  // Every int64 round-trips digit for digit: the 201, getPet (expectCreated) and a page of listPets.
  const exactly: [string, string][] = [
    ['9007199254740992', '9007199254740992'],
    ['9007199254740993', '9007199254740993'],
    ['9007199254740990', '9007199254740990'],
    ['-9007199254740992', '-9007199254740992'],
    ['-9007199254740993', '-9007199254740993'],
    ['9223372036854775807', '9223372036854775807'],
    ['-9223372036854775807', '-9223372036854775807'],
    ['-9223372036854775808', '-9223372036854775808'],
    ['9223372036854775807.0', '9223372036854775807'],
    ['9.223372036854775807e18', '9223372036854775807'],
    ['1e16', '10000000000000000'],
  ]
  for (const [literal, digits] of exactly) {
    test(`${literal} is kept and answered exactly as ${digits}`, async () => {
      const { text, pet } = await expectCreated(await postRaw(`{"name":"int64 ${literal}","categoryId":${literal}}`))
      expect(text).toContain(`"categoryId":${digits},`)
      const after = pet.id > 1 ? `&cursor=${encodeCursor(pet.id - 1)}` : ''
      const page = await fetch(`${app.base}/pets?limit=1${after}`, { headers: auth(key) })
      expect(await page.text()).toBe(`[${text}]`)
    })
  }

  const RANGE = /from -9223372036854775808 to 9223372036854775807/
  for (const literal of ['9223372036854775808', '-9223372036854775809', '1e19', '18446744073709551616', '1e400', '-1e400']) {
    test(`${literal} is outside int64: a 400 that says the range, never rounded or wrapped`, async () => {
      await expect400(await postRaw(`{"name":"big","categoryId":${literal}}`), 'categoryId', RANGE)
    })
  }

  test('1.5 and 9223372036854775806.5 are refused: not integers', async () => {
    await expect400(await postRaw('{"name":"half","categoryId":1.5}'), 'categoryId', RANGE)
    await expect400(await postRaw('{"name":"half","categoryId":9223372036854775806.5}'), 'categoryId', RANGE)
  })

  test('1.0 is accepted as 1', async () => {
    const { text, pet } = await expectCreated(await postRaw('{"name":"one","categoryId":1.0}'))
    expect(pet.categoryId).toBe(1)
    expect(text).toContain('"categoryId":1,')
  })

  test('1e3 and 10.0e2 are accepted as 1000', async () => {
    for (const literal of ['1e3', '10.0e2', '1E+3']) {
      const { pet } = await expectCreated(await postRaw(`{"name":"k","categoryId":${literal}}`))
      expect(pet.categoryId).toBe(1000)
    }
  })

  test('1.0000000000000001 is refused (JSON.parse would silently make it 1)', async () => {
    await expect400(await postRaw('{"name":"almost","categoryId":1.0000000000000001}'), 'categoryId')
  })
})

describe('POST /pets validation', () => {
  const cases: [string, unknown, string][] = [
    ['missing name', { categoryId: 1 }, 'name'],
    ['missing categoryId', { name: 'x' }, 'categoryId'],
    ['empty object', {}, 'name'],
    ['empty name', { name: '', categoryId: 1 }, 'name'],
    ['201-character name', { name: 'n'.repeat(201), categoryId: 1 }, 'name'],
    ['name with a newline', { name: 'a\nb', categoryId: 1 }, 'name'],
    ['name with a NUL', { name: 'a\u0000b', categoryId: 1 }, 'name'],
    ['name with a bell', { name: 'a\u0007', categoryId: 1 }, 'name'],
    ['name with DEL', { name: 'a\u007f', categoryId: 1 }, 'name'],
    ['name with a tab', { name: 'a\tb', categoryId: 1 }, 'name'],
    ['name as a number', { name: 5, categoryId: 1 }, 'name'],
    ['name as null', { name: null, categoryId: 1 }, 'name'],
    ['categoryId as a string', { name: 'x', categoryId: '5' }, 'categoryId'],
    ['categoryId 1.5', { name: 'x', categoryId: 1.5 }, 'categoryId'],
    ['categoryId true', { name: 'x', categoryId: true }, 'categoryId'],
    ['categoryId null', { name: 'x', categoryId: null }, 'categoryId'],
    ['categoryId as an array', { name: 'x', categoryId: [1] }, 'categoryId'],
    ['unknown status', { name: 'x', categoryId: 1, status: 'lost' }, 'status'],
    ['status null', { name: 'x', categoryId: 1, status: null }, 'status'],
    ['status in other case', { name: 'x', categoryId: 1, status: 'SOLD' }, 'status'],
    ['an id', { id: 5, name: 'x', categoryId: 1 }, 'id'],
    ['an unknown property', { name: 'x', categoryId: 1, colour: 'brown' }, 'colour'],
  ]
  for (const [label, body, field] of cases) {
    test(`${label} is a 400 naming ${field}`, async () => {
      await expect400(await postPet(app.base, key, body), field)
    })
  }

  test('the unknown-property message names the property, not just "body"', async () => {
    const body = await expect400(await postPet(app.base, key, { name: 'x', categoryId: 1, id: 3 }), 'id')
    expect(body.message).toMatch(/^id\b|\bid:|"id"|'id'/)
  })

  test("the unknown-property message lists only the body's own properties as allowed", async () => {
    const body = await expect400(await postPet(app.base, key, { name: 'x', categoryId: 1, colour: 'brown' }), 'colour')
    expect(body.message).toContain('name')
    expect(body.message).toContain('categoryId')
    expect(body.message).toContain('status')
    // limit, cursor and petId are query/path parameters, not NewPet properties.
    expect(body.message).not.toMatch(/\b(limit|cursor|petId)\b/)
  })

  test('C1 control characters (U+0080..U+009F) in name are refused like C0 ones', async () => {
    for (const name of ['a\u0085b', 'a\u009bb', '\u0080']) await expect400(await postPet(app.base, key, { name, categoryId: 1 }), 'name')
  })

  test('a lone surrogate in name is refused rather than stored altered', async () => {
    await expect400(await postRaw('{"name":"a\\ud800","categoryId":1}'), 'name')
  })

  test('a duplicated property is not silently accepted with a different meaning', async () => {
    // Either refused or the last value wins consistently; it must never create a pet named by the first.
    const res = await postRaw('{"name":"first","categoryId":1,"name":"second"}')
    if (res.status === 201) expect((await jsonOf(res)).name).toBe('second')
    else expect(res.status).toBe(400)
  })

  test('none of the refused requests created a pet', async () => {
    const before = (await jsonOf(await fetch(`${app.base}/pets?limit=100`, { headers: auth(key) }))).length
    await postPet(app.base, key, { name: '', categoryId: 1 })
    await postRaw('{"name":"big","categoryId":9223372036854775808}')
    const after = (await jsonOf(await fetch(`${app.base}/pets?limit=100`, { headers: auth(key) }))).length
    expect(after).toBe(before)
  })
})

describe('POST /pets body format', () => {
  for (const [label, text] of [
    ['truncated JSON', '{"name":"x","categoryId":1'],
    ['trailing comma', '{"name":"x","categoryId":1,}'],
    ['single quotes', "{'name':'x','categoryId':1}"],
    ['two documents', '{"name":"x","categoryId":1}{}'],
    ['NaN', '{"name":"x","categoryId":NaN}'],
  ]) {
    test(`malformed JSON (${label}) is a 400`, async () => {
      const res = await postRaw(text!)
      expect(res.status).toBe(400)
      expect(await jsonOf(res)).toEqual({ code: 'invalid_request', message: expect.stringContaining('JSON'), status: 400 })
    })
  }

  test('JSON nested deeper than the parser goes is a 400 that says so, not "not valid JSON"', async () => {
    const depth = 20_000
    const res = await postRaw(`{"name":"x","categoryId":1,"x":${'['.repeat(depth)}${']'.repeat(depth)}}`)
    expect(res.status).toBe(400)
    expect(await jsonOf(res)).toEqual({ code: 'invalid_request', message: 'body: is nested too deeply', status: 400 })
  })

  test('invalid UTF-8 is a 400', async () => {
    const bytes = new Uint8Array([...Buffer.from('{"name":"'), 0xff, 0xfe, ...Buffer.from('","categoryId":1}')])
    const res = await postRaw(bytes)
    expect(res.status).toBe(400)
    expect((await jsonOf(res)).code).toBe('invalid_request')
  })

  for (const [label, text] of [
    ['an array', '[{"name":"x","categoryId":1}]'],
    ['null', 'null'],
    ['a string', '"pet"'],
    ['a number', '42'],
  ]) {
    test(`a body that is ${label} is a 400`, async () => {
      const res = await postRaw(text!)
      expect(res.status).toBe(400)
      expect(await jsonOf(res)).toEqual({ code: 'invalid_request', message: expect.any(String), status: 400 })
    })
  }

  test('an empty body with a JSON content type is a 400', async () => {
    const res = await postRaw('')
    expect(res.status).toBe(400)
    expect((await jsonOf(res)).code).toBe('invalid_request')
  })

  test('text/plain is a 415', async () => {
    const res = await postRaw('{"name":"x","categoryId":1}', { 'content-type': 'text/plain' })
    expect(res.status).toBe(415)
    expect(await jsonOf(res)).toEqual({ code: 'unsupported_media_type', message: expect.any(String), status: 415 })
  })

  test('a body without any content type is a 415', async () => {
    const res = await postRaw(new TextEncoder().encode('{"name":"x","categoryId":1}'), {})
    expect(res.status).toBe(415)
    expect((await jsonOf(res)).code).toBe('unsupported_media_type')
  })

  test('form encoding and look-alike types are 415', async () => {
    for (const type of ['application/x-www-form-urlencoded', 'application/jsonx', 'text/json', 'multipart/form-data; boundary=x']) {
      const res = await postRaw('{"name":"x","categoryId":1}', { 'content-type': type })
      expect(res.status).toBe(415)
    }
  })

  test('a compressed body (Content-Encoding) is a 415 with Accept-Encoding: identity, and creates nothing', async () => {
    const json = '{"name":"zipped","categoryId":1}'
    for (const [coding, body] of [
      ['gzip', Bun.gzipSync(json)],
      ['gzip', json], // labelled gzip but plain: still not what it says it is
      ['br, gzip', json],
      ['identity\u00a0', json], // a no-break space is not HTTP's white space
    ] as const) {
      const res = await postRaw(body, { 'content-type': 'application/json', 'content-encoding': coding })
      expect([coding, res.status, res.headers.get('accept-encoding')]).toEqual([coding, 415, 'identity'])
      expect(await jsonOf(res)).toEqual({
        code: 'unsupported_media_type',
        message: 'Content-Encoding: the body must be sent uncompressed (identity).',
        status: 415,
      })
    }
    expect((await postRaw(json, { 'content-type': 'application/json', 'content-encoding': 'identity' })).status).toBe(201)
    const names = ((await jsonOf(await fetch(`${app.base}/pets?limit=100`, { headers: auth(key) }))) as { name: string }[]).map(
      (p) => p.name,
    )
    expect(names.filter((name) => name === 'zipped')).toHaveLength(1)
  })

  test('a body over 64 KiB is a 413', async () => {
    const text = JSON.stringify({ name: 'x', categoryId: 1, pad: 'p'.repeat(70 * 1024) })
    const res = await postRaw(text)
    expect(res.status).toBe(413)
    expect(await jsonOf(res)).toEqual({ code: 'payload_too_large', message: expect.any(String), status: 413 })
  })

  test('a streamed body over 64 KiB without Content-Length is a 413', async () => {
    const chunk = new TextEncoder().encode(' '.repeat(16 * 1024))
    let sent = 0
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 6) controller.enqueue(chunk)
        else {
          controller.enqueue(new TextEncoder().encode('{"name":"x","categoryId":1}'))
          controller.close()
        }
      },
    })
    const res = await fetch(`${app.base}/pets`, {
      method: 'POST',
      headers: { ...auth(key), 'content-type': 'application/json' },
      body: stream,
    })
    expect(res.status).toBe(413)
    expect((await jsonOf(res)).code).toBe('payload_too_large')
  })

  test('a body of exactly 64 KiB is accepted by size (whitespace padding)', async () => {
    const json = '{"name":"x","categoryId":1}'
    const text = json + ' '.repeat(64 * 1024 - json.length)
    expect(Buffer.byteLength(text)).toBe(65536)
    await expectCreated(await postRaw(text))
  })
})

test('a body naming a property twice is a 400 naming it, whichever value comes last', async () => {
  const app = await startApp()
  const key = await app.key('pro')
  for (const body of ['{"name":"","name":"Rex","categoryId":1}', '{"name":"Rex","categoryId":1,"categoryId":2}']) {
    const response = await postPet(app.base, key, body)
    expect(response.status).toBe(400)
    expect(((await response.json()) as { message: string }).message).toMatch(/^(name|categoryId): is given more than once/)
  }
  const list = await fetch(`${app.base}/pets`, { headers: auth(key) })
  expect(await list.json()).toEqual([])
})
