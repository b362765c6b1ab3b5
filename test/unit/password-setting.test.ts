/**
 * One argon2id setting per store, its oldest operator's: new hashes and the decoy an unknown name is
 * checked against take it, so a sign-in's time says nothing of which names exist.
 */
import { expect, test } from 'bun:test'
import { decoyHash, hashPassword, passwordMatches } from '../../src/domain/operators'

const settingOf = (hash: string) => hash.split('$')[3]

test('a store with no operator gets 19 MiB and 2 passes; one whose oldest hash is 64 MiB keeps 64 MiB, decoy included', async () => {
  const first = await hashPassword('first', null)
  expect(settingOf(first)).toBe('m=19456,t=2,p=1')
  expect(settingOf(await decoyHash(null))).toBe('m=19456,t=2,p=1')
  expect(settingOf(await decoyHash(first))).toBe('m=19456,t=2,p=1')

  const before = await Bun.password.hash('before', { algorithm: 'argon2id' })
  expect(settingOf(before)).toBe('m=65536,t=2,p=1')
  expect(settingOf(await hashPassword('next', before))).toBe('m=65536,t=2,p=1')
  expect(settingOf(await decoyHash(before))).toBe('m=65536,t=2,p=1')
  // A hash that is not ours to read gives the first setting.
  expect(settingOf(await hashPassword('next', 'not a hash'))).toBe('m=19456,t=2,p=1')
})

test('a password matches its hash only; an unknown name (no hash) never matches, whatever the password', async () => {
  const before = await Bun.password.hash('before', { algorithm: 'argon2id' })
  const hash = await hashPassword('right', before)
  expect(await passwordMatches('right', hash, before)).toBe(true)
  expect(await passwordMatches('wrong', hash, before)).toBe(false)
  expect(await passwordMatches('right', null, before)).toBe(false)
  expect(await passwordMatches('before', before, before)).toBe(true)
})
