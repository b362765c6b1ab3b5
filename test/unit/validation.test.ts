/**
 * Validation edges without HTTP: exact decimal-to-integer checks, list-query parsing, petId parsing
 * and JSON body reading.
 */
import { describe, expect, test } from 'bun:test'
import { ApiError } from '../../src/http/api-errors'
import { integerDenoted, readJsonBody } from '../../src/http/json-body'
import { encodeCursor } from '../../src/modules/pets/cursor'
import { parseListQuery, parsePetId } from '../../src/modules/pets/index'

function expectBadRequest(run: () => unknown, field: string) {
  let error: unknown
  try {
    run()
  } catch (e) {
    error = e
  }
  expect(error).toBeInstanceOf(ApiError)
  expect((error as ApiError).status).toBe(400)
  expect((error as ApiError).code).toBe('invalid_request')
  expect((error as ApiError).message).toContain(field)
}

describe('integerDenoted', () => {
  const equal: [string, number][] = [
    ['1.0', 1],
    ['1.000', 1],
    ['-1.0', -1],
    ['1e3', 1000],
    ['1E3', 1000],
    ['1e+3', 1000],
    ['10.0e2', 1000],
    ['100e-2', 1],
    ['0.0', 0],
    ['0e999', 0],
    ['-0.0', 0],
    ['9007199254740991.0', 9007199254740991],
    ['9.007199254740991e15', 9007199254740991],
  ]
  for (const [source, value] of equal) test(`${source} denotes exactly ${value}`, () => expect(integerDenoted(source)).toBe(BigInt(value)))

  const notEqual: [string, number][] = [
    ['1.0000000000000001', 1],
    ['0.9999999999999999999', 1],
    ['1.5', 1],
    ['1e-1', 0],
    ['9007199254740993.0', 9007199254740992],
    ['9.007199254740993e15', 9007199254740992],
    ['1e401', 1],
    ['1e400', Number.MAX_VALUE],
    ['2.0', 1],
    ['-1.0', 1],
    ['abc', 1],
    ['', 0],
    ['1.', 1],
    ['.5e1', 5],
    ['0x10', 16],
  ]
  for (const [source, value] of notEqual)
    test(`${JSON.stringify(source)} does not denote ${value}`, () => expect(integerDenoted(source)).not.toBe(BigInt(value)))

  const beyondDoubles: [string, bigint][] = [
    ['9223372036854775807', 2n ** 63n - 1n],
    ['-9223372036854775808', -(2n ** 63n)],
    ['9223372036854775807.000', 2n ** 63n - 1n],
    ['9.223372036854775807e18', 2n ** 63n - 1n],
    ['9007199254740993', 2n ** 53n + 1n],
    ['1e30', 10n ** 30n],
  ]
  for (const [source, value] of beyondDoubles)
    test(`${source} denotes exactly ${value}, beyond what a double holds`, () => expect(integerDenoted(source)).toBe(value))

  test('a non-integer is null, an integer of more than 40 digits is undefined (out of every range)', () => {
    expect(integerDenoted('1.5')).toBeNull()
    expect(integerDenoted('1e-1')).toBeNull()
    expect(integerDenoted('1e400')).toBeUndefined()
    expect(integerDenoted('1'.repeat(41))).toBeUndefined()
  })
})

describe('parseListQuery', () => {
  test('no query means limit 20, no status, from the start', () => {
    expect(parseListQuery('http://h/v1/pets')).toEqual({ limit: 20, status: undefined, afterId: 0 })
    expect(parseListQuery('http://h/v1/pets?')).toEqual({ limit: 20, status: undefined, afterId: 0 })
  })

  test('reads limit, status and cursor', () => {
    expect(parseListQuery(`http://h/v1/pets?limit=5&status=sold&cursor=${encodeCursor(42)}`)).toEqual({
      limit: 5,
      status: 'sold',
      afterId: 42,
    })
    expect(parseListQuery('http://h/v1/pets?limit=1').limit).toBe(1)
    expect(parseListQuery('http://h/v1/pets?limit=100').limit).toBe(100)
  })

  for (const value of ['0', '101', 'abc', '', '1.5', ' 1', '-1', '+1', '1e2', '0x1', '１', '1000000', '99999999999999999999'])
    test(`limit=${JSON.stringify(value)} is refused naming limit`, () =>
      expectBadRequest(() => parseListQuery(`http://h/v1/pets?limit=${encodeURIComponent(value)}`), 'limit'))

  test('a repeated parameter is refused', () => {
    expectBadRequest(() => parseListQuery('http://h/v1/pets?limit=1&limit=1'), 'limit')
    expectBadRequest(() => parseListQuery('http://h/v1/pets?status=sold&status=pending'), 'status')
  })

  test('an unknown status is refused naming status', () => {
    for (const value of ['lost', '', 'SOLD', 'sold '])
      expectBadRequest(() => parseListQuery(`http://h/v1/pets?status=${encodeURIComponent(value)}`), 'status')
  })

  test('an unknown parameter is refused naming it', () => {
    expectBadRequest(() => parseListQuery('http://h/v1/pets?page=2'), 'page')
    expectBadRequest(() => parseListQuery('http://h/v1/pets?Limit=2'), 'Limit')
  })

  test('a bad cursor is refused naming cursor', () => {
    for (const value of ['', 'x', 'garbage!', `${encodeCursor(5)}A`])
      expectBadRequest(() => parseListQuery(`http://h/v1/pets?cursor=${encodeURIComponent(value)}`), 'cursor')
  })

  test('an unknown parameter name is not echoed at unbounded length', () => {
    try {
      parseListQuery(`http://h/v1/pets?${'x'.repeat(10_000)}=1`)
      throw new Error('accepted')
    } catch (error) {
      expect((error as ApiError).message.length).toBeLessThan(200)
    }
  })
})

describe('parsePetId', () => {
  test('accepts positive int64 values', () => {
    expect(parsePetId('1')).toBe(1)
    expect(parsePetId('42')).toBe(42)
    expect(parsePetId('9007199254740991')).toBe(9007199254740991)
    expect(() => parsePetId('9223372036854775807')).not.toThrow()
  })

  for (const text of [
    '0',
    '-1',
    '01',
    'abc',
    '1.5',
    '1e3',
    ' 1',
    '1 ',
    '+1',
    '',
    '9223372036854775808',
    '18446744073709551616',
    '99999999999999999999',
  ])
    test(`refuses ${JSON.stringify(text)} naming petId`, () => expectBadRequest(() => parsePetId(text), 'petId'))
})

describe('readJsonBody', () => {
  const MAX = 64 * 1024
  const request = (body: string | Uint8Array | null, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
    new Request('http://h/v1/pets', { method: 'POST', headers, body })

  async function refusal(promise: Promise<unknown>): Promise<ApiError> {
    try {
      await promise
    } catch (error) {
      expect(error).toBeInstanceOf(ApiError)
      return error as ApiError
    }
    throw new Error('accepted')
  }

  test('parses a JSON object and keeps exact-integer decimals as integers', async () => {
    expect(await readJsonBody(request('{"name":"x","categoryId":1.0}'), MAX)).toEqual({ name: 'x', categoryId: 1 })
  })

  test('turns an inexact number into something no schema accepts', async () => {
    const body = (await readJsonBody(request('{"categoryId":1.0000000000000001}'), MAX)) as { categoryId: unknown }
    expect(typeof body.categoryId).not.toBe('number')
  })

  test('refuses media types other than application/json with 415', async () => {
    expect((await refusal(readJsonBody(request('{}', { 'content-type': 'text/plain' }), MAX))).status).toBe(415)
    expect((await refusal(readJsonBody(request(new Uint8Array([123, 125]), {}), MAX))).status).toBe(415)
  })

  test('refuses bodies over the cap with 413', async () => {
    expect((await refusal(readJsonBody(request(' '.repeat(MAX + 1)), MAX))).status).toBe(413)
  })

  test('refuses malformed JSON, invalid UTF-8 and lone surrogates with 400', async () => {
    expect((await refusal(readJsonBody(request('{'), MAX))).status).toBe(400)
    expect((await refusal(readJsonBody(request(new Uint8Array([0x22, 0xff, 0x22])), MAX))).status).toBe(400)
    expect((await refusal(readJsonBody(request('{"name":"\\udc00"}'), MAX))).message).toContain('name')
  })

  test('refuses an empty body with 400', async () => {
    expect((await refusal(readJsonBody(request(''), MAX))).status).toBe(400)
  })
})
