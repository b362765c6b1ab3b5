/**
 * The key registry reads from storage only the keys created or revoked since its last load, not the
 * whole table, and not after other changes to the data file (new pets, last-used times); a token it
 * does not know costs one read, once: at once on the data file, shared by every unknown token where
 * storage answers later (PostgreSQL, here the data file answering on a later turn, as PostgreSQL does).
 */
import { expect, test } from 'bun:test'
import { type ActiveKey, hashSecret } from '../../src/domain/api-key'
import { createKey, KeyRegistry } from '../../src/modules/keys/service'
import { openSqliteStorage } from '../../src/storage/sqlite'

const NOW = Date.UTC(2026, 0, 1)

/**
 * An in-memory store that counts the registry's reads of key changes, and the rows they return; `later`:
 * its reads answer on a later turn, and it says so, as PostgreSQL's do.
 */
function countingStore(later = false) {
  const storage = openSqliteStorage(':memory:')
  const counted = { storage, reads: 0, rows: 0 }
  const changesSince = storage.keys.changesSince.bind(storage.keys)
  storage.keys.changesSince = (after) => {
    const changes = changesSince(after)
    counted.reads++
    counted.rows += changes.records.length
    return later ? (Promise.resolve(changes) as never) : changes
  }
  if (later) Object.defineProperty(storage, 'answersAtOnce', { value: false })
  return counted
}

/** A registry loaded over a counting store, its reads counted from after the load. */
async function loadedRegistry(later = false) {
  const counted = countingStore(later)
  const registry = new KeyRegistry(counted.storage)
  await registry.reload()
  counted.reads = 0
  return Object.assign(counted, { registry })
}

test('each reload reads only the keys created or revoked since the previous one', async () => {
  const counted = countingStore()
  const { storage } = counted
  const first = await createKey(storage.keys, { plan: 'free' }, NOW)
  const registry = new KeyRegistry(storage)
  await registry.reload()
  expect(registry.find(first.secret)?.id).toBe(first.record.id)
  expect(counted.rows).toBe(1)

  const { secret, record } = await createKey(storage.keys, { plan: 'pro' }, NOW)
  expect(registry.find(secret)).toBeUndefined()
  await registry.reload()
  expect(registry.find(secret)?.id).toBe(record.id)
  expect(counted.rows).toBe(2)

  storage.keys.recordLastUsed(new Map([[record.id, NOW + 1]]))
  storage.pets.createMany({ commands: [{ pet: { name: 'Rex', categoryId: 1n, status: 'available' } }], now: NOW, locationPrefix: '' })
  await registry.reload()
  expect(counted.rows).toBe(2)

  storage.keys.revoke(record.id, NOW + 2)
  await registry.reload()
  expect(registry.find(secret)).toBeUndefined()
  expect(registry.find(first.secret)?.id).toBe(first.record.id)
  expect(registry.size).toBe(1)
  // Revoking again changes nothing, so nothing is read.
  storage.keys.revoke(record.id, NOW + 3)
  await registry.reload()
  expect(counted.rows).toBe(3)
  storage.close()
})

test('on the data file a token not in memory is read for at once: found without waiting, or remembered as no key', async () => {
  const counted = await loadedRegistry()
  const { storage, registry } = counted
  const late = await createKey(storage.keys, { plan: 'pro' }, NOW)
  expect(registry.find(late.secret)).toBeUndefined()
  // Not a promise: the gate answers without waiting.
  expect((registry.findLate(late.secret) as ActiveKey | undefined)?.id).toBe(late.record.id)
  expect(counted.reads).toBe(1)
  const guesses = Array.from({ length: 100 }, (_, i) => `psk_guess_${i}`.padEnd(47, 'x'))
  expect(guesses.map((guess) => registry.findLate(guess))).toEqual(Array(100).fill(undefined))
  expect(counted.reads).toBe(101)
  // Remembered: asking again costs no read.
  expect(registry.findLate(guesses[0]!)).toBeUndefined()
  expect(counted.reads).toBe(101)
  storage.close()
})

test('where storage answers later, a token not in memory is found by a catch-up read; unknown tokens share reads and are remembered until a key comes', async () => {
  const counted = await loadedRegistry(true)
  const { storage, registry } = counted

  const late = await createKey(storage.keys, { plan: 'pro' }, NOW)
  expect(registry.find(late.secret)).toBeUndefined()
  expect((await registry.findLate(late.secret))?.id).toBe(late.record.id)
  expect(counted.reads).toBe(1)

  // A hundred different invented tokens shaped like secrets made before the checksum, at once: one read
  // between them, not a hundred.
  const guesses = Array.from({ length: 100 }, (_, i) => `psk_guess_${i}`.padEnd(47, 'x'))
  expect(await Promise.all(guesses.map((guess) => registry.findLate(guess)))).toEqual(Array(100).fill(undefined))
  expect(counted.reads).toBe(2)
  // Remembered: asking again costs no read.
  expect(registry.findLate(guesses[0]!)).toBeUndefined()
  expect(registry.find(guesses[0]!)).toBeUndefined()
  expect(counted.reads).toBe(2)

  // A key made later with a remembered token's secret (impossible with random secrets, but the rule holds) is
  // found as soon as the registry learns of any new key.
  storage.keys.insert({ ...late.record, id: 'key_made_after', secretHash: hashSecret(guesses[1]!) })
  await registry.reload()
  expect(registry.find(guesses[1]!)?.id).toBe('key_made_after')
  storage.close()
})

test('a token that cannot be a secret (its shape, or a checksum that fails) is no key at once: no hash, no read, nothing remembered', async () => {
  const counted = await loadedRegistry()
  const { storage, registry } = counted
  const { secret } = await createKey(storage.keys, { plan: 'pro' }, NOW)
  expect(secret).toMatch(/^psk_[0-9A-Za-z]{49}$/)
  // One character changed in the random part, or in the checksum: the checksum fails.
  const swap = (at: number) => secret.slice(0, at) + (secret[at] === 'a' ? 'b' : 'a') + secret.slice(at + 1)
  const madeUp = [swap(10), swap(secret.length - 1), 'nope', `${secret}x`, 'psk_short', secret.slice(0, -1)]
  for (const token of madeUp) {
    expect(registry.find(token)).toBeUndefined()
    expect(registry.findLate(token)).toBeUndefined()
  }
  expect(counted.reads).toBe(0)
  // The real one, not in memory yet, is read for.
  expect((await registry.findLate(secret))?.plan).toBe('pro')
  expect(counted.reads).toBe(1)
  storage.close()
})

test("where storage answers later, a new key's burst: 64 requests carrying the same token at once share one look-up and one read", async () => {
  const counted = await loadedRegistry(true)
  const { storage, registry } = counted
  const late = await createKey(storage.keys, { plan: 'pro' }, NOW)
  const lookups = Array.from({ length: 64 }, () => registry.findLate(late.secret))
  expect(new Set(lookups).size).toBe(1)
  expect((await Promise.all(lookups)).map((key) => key?.id)).toEqual(Array(64).fill(late.record.id))
  expect(counted.reads).toBe(1)
  storage.close()
})
