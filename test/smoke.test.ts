import { expect, test } from 'bun:test'
import { auth, postPet, startApp } from './support/app'
import { startServer } from './support/binary'

test('in-process app creates and reads a pet over HTTP', async () => {
  const app = await startApp()
  const key = await app.key()
  const created = await postPet(app.base, key, { name: 'Rex', categoryId: 1 })
  expect(created.status).toBe(201)
  const pet = (await created.json()) as { id: number }
  const read = await fetch(`${app.base}/pets/${pet.id}`, { headers: auth(key) })
  expect(await read.json()).toEqual(pet)
})

test('binary starts on a free port and prints a bootstrap key', async () => {
  const server = await startServer()
  expect(server.bootstrapKey).toMatch(/^psk_/)
  const list = await fetch(`${server.base}/pets`, { headers: auth(server.bootstrapKey!) })
  expect(list.status).toBe(200)
  expect(await server.stop()).toBe(0)
})
