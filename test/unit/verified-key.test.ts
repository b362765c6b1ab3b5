import { expect, test } from 'bun:test'
import { keySubject } from '../../src/domain/subject'
import { ApiError } from '../../src/http/api-errors'
import { type RequestInfo, verifiedKey } from '../../src/plugins/request-info'

test('a handler reached without a verified key answers 401, not 500', () => {
  let thrown: unknown
  try {
    verifiedKey({ key: undefined } as RequestInfo)
  } catch (error) {
    thrown = error
  }
  expect(thrown).toBeInstanceOf(ApiError)
  expect((thrown as ApiError).status).toBe(401)
  const key = {
    id: 'key_x',
    plan: 'free',
    limits: { rpm: 1, rpd: 1 },
    subject: keySubject('key_x'),
    secretHash: 'h',
    endsAt: Infinity,
    replacedAt: null,
  } as const
  expect(verifiedKey({ key } as unknown as RequestInfo)).toBe(key)
})
