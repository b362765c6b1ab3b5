/**
 * Committing new pets: the service keeps one batch in flight and gathers the creates that arrive
 * meanwhile into the next; the commit worker (its own thread and connection to a data file) gives the
 * same outcomes as committing in place, and reports refusals and failures the way storage does.
 */
import { afterAll, describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { type CreatePetOutcome, IDEMPOTENCY_TTL_MS } from '../../src/domain/idempotency'
import { InThreadPetWriter } from '../../src/modules/pets/batch'
import { PetService } from '../../src/modules/pets/service'
import { openSqliteStorage } from '../../src/storage/sqlite'
import { WorkerPetWriter } from '../../src/storage/sqlite/writer'
import { type PetBatch, type PetWriter, StorageUnavailableError } from '../../src/domain/repositories'
import { tempDir } from '../support/binary'

const COMMIT_WORKER = new URL('../../src/storage/sqlite/commit-worker.ts', import.meta.url)
const NOW = Date.UTC(2026, 0, 1)
const LOCATION_PREFIX = 'http://localhost/v1/pets/'

const writers: PetWriter[] = []
afterAll(async () => {
  await Promise.all(writers.map((writer) => writer.close()))
})

function workerWriter(file: string): WorkerPetWriter {
  const writer = new WorkerPetWriter(COMMIT_WORKER, file)
  writers.push(writer)
  return writer
}

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
    locationPrefix: LOCATION_PREFIX,
    onInternalError: () => {},
    onWritesRefused: () => {},
    storageFault: () => null,
    soleWriter: true,
    onDamaged: () => {},
  })
  return { storage, writer, service }
}

describe('PetService: one batch in flight', () => {
  test('creates arriving while a batch is committed wait, and form the next batch together', async () => {
    const { storage, writer, service } = gatedService()
    const first = service.create({ name: 'a', categoryId: 1n, status: 'available' })
    await turn()
    expect(writer.batches.map((batch) => batch.commands.length)).toEqual([1])
    const later = ['b', 'c', 'd'].map((name) => service.create({ name, categoryId: 1n, status: 'available' }))
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
    expect((await service.list(query)).body).toBe('[]')
    const created = service.create({ name: 'a', categoryId: 1n, status: 'available' })
    await turn()
    writer.letOneThrough()
    await created
    expect((await service.list(query)).body).toBe('[{"id":1,"name":"a","categoryId":1,"status":"available"}]')
    storage.close()
  })

  test('close waits for the batch in flight to be committed and answered', async () => {
    const { storage, writer, service } = gatedService()
    const events: string[] = []
    const created = service.create({ name: 'a', categoryId: 1n, status: 'available' }).then(() => events.push('201'))
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

describe('WorkerPetWriter', () => {
  const pet = (name: string) => ({ name, categoryId: 7n, status: 'available' as const })
  const idempotent = (key: string, requestHash: string) => ({ keyId: 'key_1', key, requestHash })
  // Created, then replayed and refused within the TTL, then created again under a key that expired.
  const batches: PetBatch[] = [
    {
      now: NOW,
      locationPrefix: LOCATION_PREFIX,
      commands: [
        { pet: pet('a'), idempotency: idempotent('k1', 'hash-a') },
        { pet: pet('b'), idempotency: idempotent('k2', 'hash-b') },
        { pet: pet('c') },
      ],
    },
    {
      now: NOW + 1000,
      locationPrefix: LOCATION_PREFIX,
      commands: [
        { pet: pet('a'), idempotency: idempotent('k1', 'hash-a') },
        { pet: pet('x'), idempotency: idempotent('k2', 'hash-x') },
      ],
    },
    {
      now: NOW + IDEMPOTENCY_TTL_MS + 1,
      locationPrefix: LOCATION_PREFIX,
      commands: [{ pet: pet('y'), idempotency: idempotent('k2', 'hash-y') }],
    },
  ]

  async function outcomesOf(writer: PetWriter): Promise<CreatePetOutcome[][]> {
    const outcomes = []
    for (const batch of batches) outcomes.push(await writer.write(batch))
    return outcomes
  }

  test('commits on its own connection exactly what committing in place does, idempotency included', async () => {
    const inPlace = await outcomesOf(new InThreadPetWriter(openSqliteStorage(':memory:').pets))
    const storage = openSqliteStorage(join(tempDir(), 'petstore.db'))
    const outcomes = await outcomesOf(workerWriter(storage.file!))
    expect(outcomes).toEqual(inPlace)
    expect(outcomes.map((batch) => batch.map((outcome) => outcome.kind))).toEqual([
      ['created', 'created', 'created'],
      ['replayed', 'conflict'],
      ['created'],
    ])
    expect(outcomes[1]![0]).toMatchObject({
      kind: 'replayed',
      response: {
        requestHash: 'hash-a',
        status: 201,
        body: '{"id":1,"name":"a","categoryId":7,"status":"available"}',
        location: `${LOCATION_PREFIX}1`,
      },
    })
    // The main thread's connection sees the worker's commits.
    expect(storage.pets.list(0, 10, undefined).map((stored) => stored.name)).toEqual(['a', 'b', 'c', 'y'])
    storage.close()
  })

  test('a data file it cannot open is a refusal, reported per batch, and the worker goes on', async () => {
    const writer = workerWriter(join(tempDir(), 'missing', 'petstore.db'))
    for (let i = 0; i < 2; i++) {
      const refusal = await writer.write(batches[0]!).catch((error) => error)
      expect(refusal).toBeInstanceOf(StorageUnavailableError)
      expect(refusal.code).toMatch(/^SQLITE_CANTOPEN/)
    }
  })

  test('any other storage failure is an error with the cause, not a refusal', async () => {
    const storage = openSqliteStorage(join(tempDir(), 'petstore.db'))
    const writer = workerWriter(storage.file!)
    const invalid = { ...batches[0]!, commands: [{ pet: { name: 'a', categoryId: 1n, status: 'lost' as never } }] }
    const failure = await writer.write(invalid).catch((error) => error)
    expect(failure).toBeInstanceOf(Error)
    expect(failure).not.toBeInstanceOf(StorageUnavailableError)
    expect(failure.message).toMatch(/CHECK constraint failed/)
    expect(await writer.write(batches[0]!)).toHaveLength(3)
    storage.close()
  })

  test('a batch that starts with an idempotency lookup waits for another writer instead of failing', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const storage = openSqliteStorage(dataFile)
    const writer = workerWriter(dataFile)
    await writer.write(batches[0]!)
    const other = new Database(dataFile)
    other.run('BEGIN IMMEDIATE')
    const waiting = writer.write({ ...batches[0]!, commands: [{ pet: pet('d'), idempotency: idempotent('k9', 'hash-d') }] })
    // The other connection keeps its write lock for a while, as a commit on a slow disk would.
    await Bun.sleep(200)
    other.run('COMMIT')
    other.close()
    expect((await waiting).map((outcome) => outcome.kind)).toEqual(['created'])
    storage.close()
  })

  test('a thread that stops on its own fails only the batch it held; the next batch gets a new one', async () => {
    const storage = openSqliteStorage(join(tempDir(), 'petstore.db'))
    const writer = new WorkerPetWriter(new URL('../fixtures/dying-commit-worker.ts', import.meta.url), storage.file!)
    writers.push(writer)
    const dying = { ...batches[0]!, commands: [{ pet: pet('die') }] }
    const failure = await writer.write(dying).catch((error) => error)
    expect(failure).toBeInstanceOf(Error)
    expect(failure).not.toBeInstanceOf(StorageUnavailableError)
    expect(failure.message).toMatch(/stopped/)
    expect((await writer.write(batches[0]!)).map((outcome) => outcome.kind)).toEqual(['created', 'created', 'created'])
    expect(storage.pets.list(0, 10, undefined).map((stored) => stored.name)).toEqual(['a', 'b', 'c'])
    storage.close()
  })

  test('close ends the thread and its connection, so the last one closed folds the log into the file', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const storage = openSqliteStorage(dataFile)
    const writer = new WorkerPetWriter(COMMIT_WORKER, dataFile)
    await writer.write(batches[0]!)
    expect(existsSync(`${dataFile}-wal`)).toBe(true)
    await writer.close()
    expect(await writer.write(batches[0]!).catch((error) => error)).toBeInstanceOf(Error)
    storage.close()
    expect(existsSync(`${dataFile}-wal`)).toBe(false)
  })
})
