import { describe, expect, test } from 'bun:test'
import { duplicateKey } from '../../src/http/json-body'

describe('duplicateKey', () => {
  test('finds a member name repeated in one object', () => {
    expect(duplicateKey('{"name":"","name":"Rex","categoryId":1}')).toBe('name')
  })
  test('sees through escapes: "n\\u0061me" is the same name as "name"', () => {
    expect(duplicateKey('{"name":"a","n\\u0061me":"b"}')).toBe('name')
  })
  test('names in different objects, and strings that are values, are not repeats', () => {
    expect(duplicateKey('{"a":{"a":1},"b":[{"a":2},{"a":3}],"c":"a"}')).toBeNull()
    expect(duplicateKey('{"a":"\\"a\\":","b":"a"}')).toBeNull()
  })
  test('a repeat deep inside nesting is found', () => {
    expect(duplicateKey('[[{"x":1,"y":{"z":1,"z":2}}]]')).toBe('z')
  })
  test('plain values have none', () => {
    expect(duplicateKey('"name"')).toBeNull()
    expect(duplicateKey('[1,2,3]')).toBeNull()
  })
})
