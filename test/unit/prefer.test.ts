/**
 * The Prefer header as RFC 7240 §2 writes it: lists, values as tokens or quoted strings, parameters,
 * names in any case, the first of a name kept, and a clear refusal of what is not a list of preferences.
 */
import { describe, expect, test } from 'bun:test'
import { parsePrefer, PreferSyntaxError } from '../../src/http/prefer'

const read = (text: string) => [...parsePrefer(text).values()].map(({ name, value, params }) => [name, value, Object.fromEntries(params)])

describe('parsePrefer', () => {
  test('preferences, values and parameters', () => {
    expect(read('code=429')).toEqual([['code', '429', {}]])
    expect(read('fail=2; code=503')).toEqual([['fail', '2', { code: '503' }]])
    expect(read('fail=2, code=503')).toEqual([
      ['fail', '2', {}],
      ['code', '503', {}],
    ])
    expect(read('respond-async, wait=10')).toEqual([
      ['respond-async', undefined, {}],
      ['wait', '10', {}],
    ])
    expect(read('return=minimal ;foo="bar"')).toEqual([['return', 'minimal', { foo: 'bar' }]])
  })

  test('quoted strings may hold commas, semicolons and escaped quotes; an empty value is no value', () => {
    expect(read('x="a, b; c", y="say \\"hi\\""')).toEqual([
      ['x', 'a, b; c', {}],
      ['y', 'say "hi"', {}],
    ])
    expect(read('code=""')).toEqual([['code', undefined, {}]])
  })

  test('names in any case, spaces around = and ;, empty list elements, the first of a name kept', () => {
    expect(read(' , CODE = 429 ;  Why = "x" ,, code=500')).toEqual([['code', '429', { why: 'x' }]])
    expect(read('a; ;b=1; B=2')).toEqual([['a', undefined, { b: '1' }]])
    expect(read('')).toEqual([])
  })

  test('what is not a list of preferences is refused with where it breaks', () => {
    for (const [text, at] of [
      ['code=4 29', 7],
      ['code="429', 9],
      ['=1', 0],
      ['code=(429)', 5],
      ['a b', 2],
    ] as const) {
      let error: unknown
      try {
        parsePrefer(text)
      } catch (caught) {
        error = caught
      }
      expect(error).toBeInstanceOf(PreferSyntaxError)
      expect((error as PreferSyntaxError).at).toBe(at)
    }
  })
})
