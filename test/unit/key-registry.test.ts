/**
 * The key registry reads from storage only the keys created or revoked since its last load, not the
 * whole table, and not after other changes to the data file (new pets, last-used times).
 */
import { expect, test } from 'bun:test'
import { createKey, KeyRegistry } from '../../src/modules/keys/service'
import { openSqliteStorage } from '../../src/storage/sqlite'

const NOW = Date.UTC(2026, 0, 1)

test('each reload reads only the keys created or revoked since the previous one', async () => {
  const storage = openSqliteStorage(':memory:')
  let rowsRead = 0
  const changesSince = storage.keys.changesSince.bind(storage.keys)
  storage.keys.changesSince = (after) => {
    const changes = changesSince(after)
    rowsRead += changes.records.length
    return changes
  }
  const first = await createKey(storage.keys, { plan: 'free' }, NOW)
  const registry = new KeyRegistry(storage)
  registry.reload()
  expect(registry.find(first.secret)?.id).toBe(first.record.id)
  expect(rowsRead).toBe(1)

  const { secret, record } = await createKey(storage.keys, { plan: 'pro' }, NOW)
  expect(registry.find(secret)).toBeUndefined()
  registry.reload()
  expect(registry.find(secret)?.id).toBe(record.id)
  expect(rowsRead).toBe(2)

  storage.keys.recordLastUsed(new Map([[record.id, NOW + 1]]))
  storage.pets.createMany({ commands: [{ pet: { name: 'Rex', categoryId: 1n, status: 'available' } }], now: NOW, locationPrefix: '' })
  registry.reload()
  expect(rowsRead).toBe(2)

  storage.keys.revoke(record.id, NOW + 2)
  registry.reload()
  expect(registry.find(secret)).toBeUndefined()
  expect(registry.find(first.secret)?.id).toBe(first.record.id)
  expect(registry.size).toBe(1)
  // Revoking again changes nothing, so nothing is read.
  storage.keys.revoke(record.id, NOW + 3)
  registry.reload()
  expect(rowsRead).toBe(3)
  storage.close()
})
