/**
 * Committing new pets: the service keeps one batch in flight and gathers the creates that arrive
 * meanwhile into the next.
 */
import { describe, expect, test } from 'bun:test'
import { PetService } from '../../src/modules/pets/service'
import { InThreadPetWriter, type PetBatch, type PetWriter } from '../../src/modules/pets/writer'
import { openSqliteStorage } from '../../src/storage/sqlite'
import type { CreatePetOutcome } from '../../src/storage/types'

const NOW = Date.UTC(2026, 0, 1)
const LOCATION_PREFIX = 'http://localhost/v1/pets/'

const turn = () => new Promise<void>((resolve) => setImmediate(resolve))

/** Holds every batch until the test lets it through, and records what it was given. */
class GatedWriter implements PetWriter {
  readonly batches: PetBatch[] = []
  inFlight = 0
  maxInFlight = 0
  private readonly gates: (() => void)[] = []

  constructor(private readonly inner: PetWriter) {}

  async write(batch: PetBatch): Promise<CreatePetOutcome[]> {
    this.batches.push(batch)
    this.maxInFlight = Math.max(this.maxInFlight, ++this.inFlight)
    await new Promise<void>((resolve) => this.gates.push(resolve))
    try {
      return await this.inner.write(batch)
    } finally {
      this.inFlight--
    }
  }

  letOneThrough(): void {
    this.gates.shift()!()
  }

  close(): Promise<void> {
    return this.inner.close()
  }
}

function gatedService() {
  const storage = openSqliteStorage(':memory:')
  const writer = new GatedWriter(new InThreadPetWriter(storage.pets))
  const service = new PetService(storage.pets, writer, {
    now: () => NOW,
    locationPrefix: () => LOCATION_PREFIX,
    onInternalError: () => {},
    onWritesRefused: () => {},
  })
  return { storage, writer, service }
}

describe('PetService: one batch in flight', () => {
  test('creates arriving while a batch is committed wait, and form the next batch together', async () => {
    const { storage, writer, service } = gatedService()
    const first = service.create({ name: 'a', categoryId: 1, status: 'available' })
    await turn()
    expect(writer.batches.map((batch) => batch.commands.length)).toEqual([1])
    const later = ['b', 'c', 'd'].map((name) => service.create({ name, categoryId: 1, status: 'available' }))
    await turn()
    expect(writer.batches).toHaveLength(1)

    writer.letOneThrough()
    expect(await first).toMatchObject({ status: 201, location: `${LOCATION_PREFIX}1`, replayed: false })
    await turn()
    expect(writer.batches.map((batch) => batch.commands.map((command) => command.pet.name))).toEqual([['a'], ['b', 'c', 'd']])
    expect(writer.batches[1]!.locationPrefix).toBe(LOCATION_PREFIX)
    writer.letOneThrough()
    expect((await Promise.all(later)).map((created) => created.body)).toEqual([
      '{"id":2,"name":"b","categoryId":1,"status":"available"}',
      '{"id":3,"name":"c","categoryId":1,"status":"available"}',
      '{"id":4,"name":"d","categoryId":1,"status":"available"}',
    ])
    expect(writer.maxInFlight).toBe(1)
    storage.close()
  })

  test('the cached last page is forgotten before a create is answered', async () => {
    const { storage, writer, service } = gatedService()
    const query = { limit: 20, status: undefined, afterId: 0 }
    expect(service.list(query).body).toBe('[]')
    const created = service.create({ name: 'a', categoryId: 1, status: 'available' })
    await turn()
    writer.letOneThrough()
    await created
    expect(service.list(query).body).toBe('[{"id":1,"name":"a","categoryId":1,"status":"available"}]')
    storage.close()
  })

  test('close waits for the batch in flight to be committed and answered', async () => {
    const { storage, writer, service } = gatedService()
    const events: string[] = []
    const created = service.create({ name: 'a', categoryId: 1, status: 'available' }).then(() => events.push('201'))
    await turn()
    const closed = service.close().then(() => events.push('closed'))
    await turn()
    expect(events).toEqual([])
    writer.letOneThrough()
    await Promise.all([created, closed])
    expect(events).toEqual(['201', 'closed'])
    expect(storage.pets.count()).toBe(1)
    storage.close()
  })
})
