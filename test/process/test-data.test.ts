/**
 * What an integrator uses to test a client against petstore, against the binary: sample pets, an empty
 * store with the keys kept, and a key's limits reset, each seen by a running server within a second.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { auth, postPet } from '../support/app'
import { cli, createKeyWithCli, eventually, startServer } from '../support/binary'
import { killSpawned, listAll, reasonLine } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(30_000)

const keyId = (stderr: string) => /key (key_\S+)/.exec(stderr)![1]!

describe('test data and limits for integrators', () => {
  test('pets seed adds sample pets a running server lists at once; pets reset empties the store and keeps the keys', async () => {
    const server = await startServer()
    const key = createKeyWithCli(server.dataFile, ['--plan', 'enterprise', '--rpm', '100000', '--rpd', '1000000'])
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(key) })).status === 200, 2_000)
    expect((await postPet(server.base, key, { name: 'mine', categoryId: 9 })).status).toBe(201)
    // Cache the last page, which the seed must change.
    expect((await listAll(server.base, key)).length).toBe(1)

    const seeded = cli(['pets', 'seed', '--count', '250', '--data', server.dataFile])
    expect(seeded.code).toBe(0)
    expect(seeded.stderr).toBe(`petstore: added 250 sample pets to ${server.dataFile}\n`)
    await eventually(async () => (await listAll(server.base, key)).length === 251, 2_000)
    const pets = await listAll(server.base, key)
    expect(new Set(pets.slice(1).map((pet) => pet.status))).toEqual(new Set(['available', 'pending', 'sold']))
    for (const pet of pets.slice(1)) {
      expect(pet.name).toMatch(/^[A-Z][a-z]+$/)
      expect(pet.categoryId).toBeGreaterThanOrEqual(1)
      expect(pet.categoryId).toBeLessThanOrEqual(5)
    }

    const refused = cli(['pets', 'reset', '--data', server.dataFile])
    expect(refused.code).toBe(2)
    expect(refused.stderr).toBe(
      `petstore: pets reset deletes all 251 pets in ${server.dataFile} (keys are kept); run it again with --yes\n`,
    )
    const reset = cli(['pets', 'reset', '--yes', '--data', server.dataFile])
    expect(reset.code).toBe(0)
    await eventually(async () => (await listAll(server.base, key)).length === 0, 2_000)
    expect((await fetch(`${server.base}/pets/${pets[0]!.id}`, { headers: auth(key) })).status).toBe(404)
    // Keys are kept, and new pets get new ids.
    const after = await postPet(server.base, key, { name: 'after', categoryId: 1 })
    expect(after.status).toBe(201)
    expect(((await after.json()) as { id: number }).id).toBeGreaterThan(pets.at(-1)!.id)

    expect(cli(['pets', 'seed', '--count', '0', '--data', server.dataFile]).code).toBe(2)
    expect(reasonLine(cli(['pets', 'seed', '--data', server.dataFile]).stderr)).toBe('petstore: pets seed needs --count N')
    expect(await server.stop()).toBe(0)
  })

  test('keys reset-limits refills an exhausted key and lifts its ban on a running server within a second', async () => {
    const server = await startServer({ args: ['--ban-after', '2', '--ban-seconds', '600'] })
    const created = cli(['keys', 'create', '--plan', 'free', '--data', server.dataFile])
    const key = created.stdout.trim()
    const id = keyId(created.stderr)
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(key) })).status === 200, 2_000)
    // Use the minute up, then earn a ban.
    let last = 200
    for (let i = 0; i < 70 && last !== 429; i++) last = (await fetch(`${server.base}/pets`, { headers: auth(key) })).status
    for (let i = 0; i < 3; i++) await fetch(`${server.base}/pets`, { headers: auth(key) })
    const banned = await fetch(`${server.base}/pets`, { headers: auth(key) })
    expect(banned.status).toBe(429)
    expect(((await banned.json()) as { code: string }).code).toBe('key_banned')

    const reset = cli(['keys', 'reset-limits', id, '--data', server.dataFile])
    expect(reset.code).toBe(0)
    await eventually(async () => (await fetch(`${server.base}/pets`, { headers: auth(key) })).status === 200, 1_500)
    const fresh = await fetch(`${server.base}/pets`, { headers: auth(key) })
    expect(Number(fresh.headers.get('x-ratelimit-remaining'))).toBeGreaterThan(50)

    const unknown = cli(['keys', 'reset-limits', 'key_nope', '--data', server.dataFile])
    expect(unknown.code).toBe(1)
    // A revoked key is refused alike: reset-limits acts on active keys only, as set-plan does.
    expect(unknown.stderr).toBe(`petstore: no active key with id "key_nope" in ${server.dataFile}\n`)
    expect(await server.stop()).toBe(0)
  })
})
