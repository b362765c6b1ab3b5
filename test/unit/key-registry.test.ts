/**
 * The key registry reloads from storage only when a key was created or revoked, not on every other
 * change to the data file (new pets, last-used times).
 */
import { expect, test } from 'bun:test'
import { createKey, KeyRegistry } from '../../src/modules/keys/service'
import { openSqliteStorage } from '../../src/storage/sqlite'

const NOW = Date.UTC(2026, 0, 1)

test('reloadIfChanged lists the keys again only after a key was created or revoked', async () => {
  const storage = openSqliteStorage(':memory:')
  let lists = 0
  const list = storage.keys.list.bind(storage.keys)
  storage.keys.list = () => {
    lists++
    return list()
  }
  const registry = new KeyRegistry(storage)
  registry.reload()
  const { secret, record } = await createKey(storage.keys, { plan: 'pro' }, NOW)
  expect(registry.find(secret)).toBeUndefined()
  registry.reloadIfChanged()
  expect(registry.find(secret)?.id).toBe(record.id)
  expect(lists).toBe(2)

  storage.keys.recordLastUsed(new Map([[record.id, NOW + 1]]))
  storage.pets.createMany([{ pet: { name: 'Rex', categoryId: 1, status: 'available' } }], NOW, {
    render: () => ({ body: '', location: '' }),
    judge: () => null,
  })
  registry.reloadIfChanged()
  expect(lists).toBe(2)

  storage.keys.revoke(record.id, NOW + 2)
  registry.reloadIfChanged()
  expect(registry.find(secret)).toBeUndefined()
  storage.keys.revoke(record.id, NOW + 3)
  registry.reloadIfChanged()
  expect(lists).toBe(3)
  storage.close()
})
