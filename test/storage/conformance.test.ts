/**
 * The storage seam's conformance suite: every backend (the SQLite file, PostgreSQL) passes the same
 * cases, through two handles on one store where the case is about other processes or instances
 * (idempotency races, ordered id visibility, keys, the one bootstrap key).
 */
import { Database } from 'bun:sqlite'
import { afterAll, describe, expect, test } from 'bun:test'
import { join } from 'node:path'
import type { ApiKeyRecord, KeyChange } from '../../src/domain/api-key'
import { type CreatePetOutcome, IDEMPOTENCY_TTL_MS } from '../../src/domain/idempotency'
import { INT64_MAX, INT64_MIN, type NewPet } from '../../src/domain/pet'
import { makeKey } from '../../src/domain/api-key'
import { COUNTERS, DEPRECATED, emptyCounts, FIRST_LATENCY, LIMITED, NO_KEY, OK, type UsageRow } from '../../src/domain/usage'
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../src/domain/time'
import { openPostgresStorage } from '../../src/storage/postgres'
import { openSqliteStorage, type SqliteStorage } from '../../src/storage/sqlite'
import {
  BatchRolledBackError,
  type CreatePetCommand,
  type Storage,
  StorageOpenError,
  StorageUnavailableError,
} from '../../src/domain/repositories'
import { LOCKS, MIGRATIONS as POSTGRES_MIGRATIONS } from '../../src/storage/postgres/migrations'
import { keyChangesAfter } from '../../src/storage/shared/keys'
import { APPLICATION_ID, MIGRATIONS as SQLITE_MIGRATIONS } from '../../src/storage/sqlite/migrations'
import { tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { PATIENT, type PostgresCluster, postgresForSuite } from '../support/postgres'

/** The sign-in throttle of the tests written before addresses counted: one address, one bound. */
const signInThrottle = (since: number, limit: number) => ({ address: '192.0.2.1', since, perAddress: limit, perName: limit })
const NOW = Date.UTC(2026, 0, 1)
const PREFIX = 'http://localhost/v1/pets/'

interface Backend {
  /** A new, empty store, and a function that opens another handle on the same store. */
  fresh(): Promise<{ a: Storage; b: () => Promise<Storage> }>
  /** Makes the store refuse to insert a pet named `name` (a trigger), as a store may refuse one row. */
  refuseName(storage: Storage, name: string): Promise<void>
  /** A store at the schema before change numbers, holding `key` as that schema stored it, and a function that opens it. */
  previousSchema(key: ApiKeyRecord): Promise<() => Promise<Storage>>
}

/** What a change reports of a key. */
const CHANGE_FIELDS = [
  'id',
  'plan',
  'rpm',
  'rpd',
  'secretHash',
  'revokedAt',
  'expiresAt',
  'rolledAt',
  'previousSecretHash',
  'previousEndsAt',
] as const
const changeOf = (record: ApiKeyRecord) => Object.fromEntries(CHANGE_FIELDS.map((field) => [field, record[field]])) as KeyChange
const keyRow = (r: ApiKeyRecord) => [r.id, r.name, r.plan, r.rpm, r.rpd, r.secretHash, r.createdAt]
const INSERT_KEY_ROW = 'INSERT INTO api_keys (id, name, plan, rpm, rpd, secret_hash, created_at)'

/** How many steps each backend's schema had before keys took change numbers. */
const SQLITE_BEFORE_CHANGE_NUMBERS = 2
const POSTGRES_BEFORE_CHANGE_NUMBERS = 1

const opened: Storage[] = []
async function track<T extends Storage>(storage: T | Promise<T>): Promise<T> {
  const handle = await storage
  opened.push(handle)
  return handle
}
afterAll(async () => {
  for (const storage of opened.splice(0)) await storage.close()
})

const sqlite: Backend = {
  async fresh() {
    const file = join(tempDir(), 'petstore.db')
    return { a: await track(openSqliteStorage(file)), b: () => track(openSqliteStorage(file)) }
  },
  async refuseName(storage, name) {
    const db = new Database((storage as SqliteStorage).file!)
    db.run(`CREATE TRIGGER refuse_name BEFORE INSERT ON pets WHEN NEW.name = '${name}' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
    db.close()
  },
  async previousSchema(key) {
    const file = join(tempDir(), 'petstore.db')
    const db = new Database(file)
    for (const [step, migration] of SQLITE_MIGRATIONS.slice(0, SQLITE_BEFORE_CHANGE_NUMBERS).entries()) {
      db.run(migration)
      db.run(`PRAGMA application_id = ${APPLICATION_ID}`)
      db.run(`PRAGMA user_version = ${step + 1}`)
    }
    db.query(`${INSERT_KEY_ROW} VALUES (?, ?, ?, ?, ?, ?, ?)`).run(...keyRow(key))
    db.close()
    return () => track(openSqliteStorage(file))
  },
}

let cluster: PostgresCluster
let databases = 0
/** The database each first handle was opened on. */
const urls = new Map<Storage, string>()
const postgres: Backend = {
  async fresh() {
    const url = await cluster.createDatabase(`conformance_${++databases}`)
    const a = await track(openPostgresStorage(url, { pool: 4, deadlines: PATIENT }))
    urls.set(a, url)
    return { a, b: () => track(openPostgresStorage(url, { pool: 4, deadlines: PATIENT })) }
  },
  async refuseName(storage, name) {
    const admin = new Bun.SQL(urls.get(storage)!, { max: 1 })
    try {
      await admin.unsafe(`CREATE FUNCTION refuse_name() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
                          CREATE TRIGGER refuse_name BEFORE INSERT ON pets FOR EACH ROW WHEN (NEW.name = '${name}') EXECUTE FUNCTION refuse_name()`)
    } finally {
      await admin.close()
    }
  },
  async previousSchema(key) {
    const url = await cluster.createDatabase(`conformance_${++databases}`)
    const admin = new Bun.SQL(url, { max: 1 })
    try {
      await admin.unsafe('CREATE TABLE petstore_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())')
      for (const [step, migration] of POSTGRES_MIGRATIONS.slice(0, POSTGRES_BEFORE_CHANGE_NUMBERS).entries()) {
        await admin.unsafe(migration)
        await admin`INSERT INTO petstore_schema (version) VALUES (${step + 1})`
      }
      await admin.unsafe(`${INSERT_KEY_ROW} VALUES ($1, $2, $3, $4, $5, $6, $7)`, keyRow(key))
    } finally {
      await admin.close()
    }
    return () => track(openPostgresStorage(url, { pool: 2, deadlines: PATIENT }))
  },
}

/** A usage row's counters: zero but for the slots given. */
function counts(slots: Record<number, number>): number[] {
  const row = emptyCounts()
  for (const [slot, value] of Object.entries(slots)) row[Number(slot)] = value
  return row
}

const pet = (name: string, categoryId = 1n): NewPet => ({ name, categoryId, status: 'available' })

async function create(storage: Storage, commands: CreatePetCommand[], now = NOW): Promise<CreatePetOutcome[]> {
  return storage.pets.createMany({ commands, now, locationPrefix: PREFIX })
}

const withKey = (name: string, key: string, requestHash = `hash-of-${name}`): CreatePetCommand => ({
  pet: pet(name),
  idempotency: { keyId: 'key_a', key, requestHash },
})

function conformance(name: string, backend: Backend) {
  test(`${name}: pets are created in one batch, listed in id order by keyset, and read back exactly`, async () => {
    const { a } = await backend.fresh()
    // int64's ends and the first values a double cannot hold, stored and read back exactly.
    const extremes = [INT64_MAX, INT64_MIN, 0n, 2n ** 53n + 1n, -(2n ** 53n) - 1n, -INT64_MAX]
    const outcomes = await create(
      a,
      extremes.map((categoryId, i) => ({ pet: pet(`p${i}`, categoryId) })),
    )
    const ids = outcomes.map((outcome) => (outcome.kind === 'created' ? outcome.pet.id : -1))
    expect(ids[0]).toBeGreaterThan(0)
    expect(ids).toEqual([...ids].sort((x, y) => x - y))
    expect(outcomes[0]).toMatchObject({ kind: 'created', location: `${PREFIX}${ids[0]}`, body: expect.stringContaining(`"id":${ids[0]}`) })
    expect((await a.pets.list(0, 10, undefined)).map((p) => p.categoryId)).toEqual(extremes)
    expect(await a.pets.list(ids[0]!, 1, undefined)).toEqual([{ id: ids[1]!, name: 'p1', categoryId: INT64_MIN, status: 'available' }])
    expect(await a.pets.list(0, 10, 'sold')).toEqual([])
    expect(await a.pets.list(ids[1]!, 1, undefined)).toEqual([{ id: ids[2]!, name: 'p2', categoryId: 0n, status: 'available' }])
    expect(await a.pets.list(ids[5]!, 64, undefined)).toEqual([])
    expect(await a.pets.count()).toBe(extremes.length)
  })

  test(`${name}: an Idempotency-Key replays its first answer, refuses a different request, and expires`, async () => {
    const { a } = await backend.fresh()
    const [first] = await create(a, [withKey('Rex', 'k1')])
    expect(first!.kind).toBe('created')
    const [again] = await create(a, [withKey('Rex', 'k1')], NOW + 1000)
    expect(again).toEqual({ kind: 'replayed', response: expect.objectContaining({ body: (first as { body: string }).body, status: 201 }) })
    expect((await create(a, [withKey('Max', 'k1', 'other')], NOW + 2000))[0]).toEqual({ kind: 'conflict' })
    const [later] = await create(a, [withKey('Max', 'k1', 'other')], NOW + IDEMPOTENCY_TTL_MS + 1)
    expect(later!.kind).toBe('created')
    expect(await a.pets.count()).toBe(2)
  })

  test(`${name}: a key used twice in one batch acts as if the two came one after the other`, async () => {
    const { a } = await backend.fresh()
    const outcomes = await create(a, [withKey('Rex', 'k'), { pet: pet('plain') }, withKey('Rex', 'k'), withKey('Max', 'k', 'other')])
    expect(outcomes.map((outcome) => outcome.kind)).toEqual(['created', 'created', 'replayed', 'conflict'])
    const created = outcomes[0] as { body: string; location: string }
    expect(outcomes[2]).toMatchObject({ response: { body: created.body, location: created.location } })
    expect(await a.pets.count()).toBe(2)
  })

  test(`${name}: the same Idempotency-Key through two handles at once creates one pet`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    for (let round = 0; round < 10; round++) {
      const key = `race-${round}`
      const outcomes = (await Promise.all([a, other, a, other].map((storage) => create(storage, [withKey('Rex', key)])))).flat()
      expect(outcomes.filter((outcome) => outcome.kind === 'created')).toHaveLength(1)
      expect(outcomes.filter((outcome) => outcome.kind === 'replayed')).toHaveLength(3)
    }
    expect(await a.pets.count()).toBe(10)
  })

  test(`${name}: a reader paging while two handles insert never skips or repeats a pet`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const reader = await b()
    let writing = true
    const writer = async (storage: Storage, tag: string) => {
      for (let i = 0; i < 60; i++)
        await create(
          storage,
          Array.from({ length: 1 + (i % 3) }, (_, j) => ({ pet: pet(`${tag}${i}.${j}`) })),
        )
    }
    const seen: number[] = []
    const read = async () => {
      let cursor = 0
      // Keeps paging while writers run, then once more to the end.
      for (let idle = 0; writing || idle < 1; ) {
        // Whether the writers had finished when this read began: an empty page read while they ran
        // (answered after they finished) says nothing about their last rows.
        const afterWriters = !writing
        const page = await reader.pets.list(cursor, 7, undefined)
        if (page.length === 0) {
          if (afterWriters) idle++
          await new Promise((resolve) => setImmediate(resolve))
          continue
        }
        seen.push(...page.map((p) => p.id))
        cursor = page[page.length - 1]!.id
      }
    }
    const reading = read()
    await Promise.all([writer(a, 'a'), writer(other, 'b'), writer(a, 'c')])
    writing = false
    await reading
    const all = (await a.pets.list(0, 10_000, undefined)).map((p) => p.id)
    expect(all.length).toBe(3 * (20 * 1 + 20 * 2 + 20 * 3))
    expect(seen).toEqual(all)
  })

  test(`${name}: a batch whose transaction fails on one row is rolled back whole, and says so`, async () => {
    const { a } = await backend.fresh()
    await backend.refuseName(a, 'refused')
    const failed = create(a, [withKey('Rex', 'k1'), { pet: pet('refused') }, withKey('Max', 'k2')])
    await expect(failed).rejects.toBeInstanceOf(BatchRolledBackError)
    await expect(failed).rejects.toThrow(/refused/)
    expect(await a.pets.count()).toBe(0)
    // Nothing of it was kept: the keys create afresh.
    expect((await create(a, [withKey('Rex', 'k1'), withKey('Max', 'k2')])).map((outcome) => outcome.kind)).toEqual(['created', 'created'])
  })

  test(`${name}: a batch of 9,000 creates with Idempotency-Keys is one transaction`, async () => {
    const { a } = await backend.fresh()
    const outcomes = await create(
      a,
      Array.from({ length: 9_000 }, (_, i) => withKey(`p${i}`, `bulk-${i}`)),
    )
    expect(outcomes.every((outcome) => outcome.kind === 'created')).toBe(true)
    const again = await create(a, [withKey('p8999', 'bulk-8999'), withKey('x', 'bulk-0', 'other')])
    expect(again.map((outcome) => outcome.kind)).toEqual(['replayed', 'conflict'])
    expect(await a.pets.count()).toBe(9_000)
  })

  test(`${name}: keys are stored, listed, revoked, and read by other handles as changes, only once each`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const empty = await other.keys.changesSince(-1)
    expect(empty.records).toEqual([])
    const { record } = makeKey({ plan: 'pro', name: 'app' }, NOW)
    const { record: second } = makeKey({ plan: 'free', name: 'second' }, NOW + 1)
    await a.keys.insert(record)
    await a.keys.insert(second)
    const created = await other.keys.changesSince(empty.last)
    expect(created.records).toEqual([changeOf(record), changeOf(second)])
    expect(created.last).toBeGreaterThan(empty.last)
    expect(await other.keys.changesSince(created.last)).toEqual({ records: [], last: created.last })
    expect(await other.keys.list()).toEqual([record, second])

    expect(await a.keys.revoke(record.id, NOW + 5)).toBe('revoked')
    expect(await a.keys.revoke('key_missing', NOW + 5)).toBe('no-key')
    const revoked = await other.keys.changesSince(created.last)
    expect(revoked.records).toEqual([changeOf({ ...record, revokedAt: NOW + 5 })])
    // A second revoke keeps the first time, is no change and says so; neither are last-used times.
    expect(await a.keys.revoke(record.id, NOW + 6)).toBe('already-revoked')
    await a.keys.recordLastUsed(new Map([[record.secretHash, NOW + 9]]))
    await a.keys.recordLastUsed(new Map([[record.secretHash, NOW + 7]]))
    expect(await other.keys.changesSince(revoked.last)).toEqual({ records: [], last: revoked.last })
    expect((await other.keys.list())[0]).toMatchObject({ revokedAt: NOW + 5, lastUsedAt: NOW + 9 })
    // One key alone, revoked or not; none by an id no key has.
    expect(await other.keys.get(record.id)).toEqual({ ...record, revokedAt: NOW + 5, lastUsedAt: NOW + 9, secretLastUsedAt: NOW + 9 })
    expect(await other.keys.get(second.id)).toEqual(second)
    expect(await other.keys.get('key_missing')).toBeNull()
    // From the start, every key in the order of its last change.
    expect((await other.keys.changesSince(-1)).records.map((key) => key.id)).toEqual([second.id, record.id])
  })

  test(`${name}: a key's expiry and rolls are changes; a roll keeps the previous secret to its end, ends an older one, and each secret's last use is its own`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const { record } = makeKey({ plan: 'pro', name: 'rolled' }, NOW, NOW + DAY_MS)
    await a.keys.insert(record)
    const start = await other.keys.changesSince(-1)
    expect(start.records).toEqual([changeOf(record)])
    expect(await a.keys.setExpiry(record.id, null)).toBe(true)
    expect(await a.keys.setExpiry('key_missing', null)).toBe(false)
    const never = await other.keys.changesSince(start.last)
    expect(never.records).toEqual([changeOf({ ...record, expiresAt: null })])
    await a.keys.recordLastUsed(new Map([[record.secretHash, NOW + 1]]))

    expect(await a.keys.roll(record.id, 'second-hash', NOW + 10, NOW + 100)).toBe(true)
    const rolled = await other.keys.changesSince(never.last)
    expect(rolled.records).toEqual([
      {
        ...changeOf(record),
        expiresAt: null,
        secretHash: 'second-hash',
        rolledAt: NOW + 10,
        previousSecretHash: record.secretHash,
        previousEndsAt: NOW + 100,
      },
    ])
    // A use of either secret lands on its own; the key's last use is the later.
    await a.keys.recordLastUsed(
      new Map([
        [record.secretHash, NOW + 20],
        ['second-hash', NOW + 15],
      ]),
    )
    expect(await other.keys.get(record.id)).toMatchObject({
      lastUsedAt: NOW + 20,
      secretLastUsedAt: NOW + 15,
      previousLastUsedAt: NOW + 20,
      secretFormat: 'checked',
    })
    // Rolling again: the first secret is dropped, the second is kept to its new end.
    expect(await a.keys.roll(record.id, 'third-hash', NOW + 30, NOW + 30)).toBe(true)
    expect(await other.keys.get(record.id)).toMatchObject({
      secretHash: 'third-hash',
      previousSecretHash: 'second-hash',
      previousEndsAt: NOW + 30,
      secretLastUsedAt: null,
      previousLastUsedAt: NOW + 15,
    })
    // A revoked key has neither.
    expect(await a.keys.revoke(record.id, NOW + 40)).toBe('revoked')
    expect(await a.keys.roll(record.id, 'fourth-hash', NOW + 41, NOW + 41)).toBe(false)
    expect(await a.keys.setExpiry(record.id, NOW + DAY_MS)).toBe(false)
  })

  test(`${name}: a store from before change numbers is upgraded in place: its keys are read once, then only changes`, async () => {
    const { record: old } = makeKey({ plan: 'pro', name: 'old' }, NOW)
    const storage = await (await backend.previousSchema(old))()
    const all = await storage.keys.changesSince(-1)
    expect(all.records).toEqual([changeOf(old)])
    const { record: fresh } = makeKey({ plan: 'free', name: 'new' }, NOW + 1)
    await storage.keys.insert(fresh)
    const next = await storage.keys.changesSince(all.last)
    expect(next.records).toEqual([changeOf(fresh)])
    expect(await storage.keys.revoke(old.id, NOW + 2)).toBe('revoked')
    expect((await storage.keys.changesSince(next.last)).records).toEqual([changeOf({ ...old, revokedAt: NOW + 2 })])
  })

  test(`${name}: handles that make the bootstrap key at the same moment make one`, async () => {
    const { a, b } = await backend.fresh()
    const handles = [a, await b(), await b(), await b()]
    const made = await Promise.all(
      handles.map((storage) => storage.keys.insertIfNone(makeKey({ plan: 'free', name: 'bootstrap' }, NOW).record)),
    )
    expect(made.filter(Boolean)).toHaveLength(1)
    expect(await a.keys.list()).toHaveLength(1)
  })

  test(`${name}: 30 revocations of one key at once through two handles: exactly one revoked it, the others are told it already was`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const { record } = makeKey({ plan: 'pro' }, NOW)
    await a.keys.insert(record)
    const done = await Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 ? other : a).keys.revoke(record.id, NOW + 1 + i)))
    expect(done.filter((outcome) => outcome === 'revoked')).toHaveLength(1)
    expect(done.filter((outcome) => outcome === 'already-revoked')).toHaveLength(29)
    expect((await other.keys.list())[0]!.revokedAt).toBe(NOW + 1 + done.indexOf('revoked'))
  })

  test(`${name}: a saved day bucket keeps its limits; a plan change removes only one saved without them, when the limits change`, async () => {
    const { a } = await backend.fresh()
    const withLimits = makeKey({ plan: 'free' }, NOW).record
    const without = makeKey({ plan: 'free' }, NOW).record
    await a.keys.insert(withLimits)
    await a.keys.insert(without)
    const limits = { rpm: withLimits.rpm, rpd: withLimits.rpd }
    await a.limiterState.save(
      new Map([
        [`key:${withLimits.id}`, { tokens: 12.5, updatedAt: NOW, limits }],
        [`key:${without.id}`, { tokens: 3, updatedAt: NOW }],
      ]),
    )
    const saved = async () => Object.fromEntries(await a.limiterState.load())
    expect(await saved()).toEqual({
      [`key:${withLimits.id}`]: { tokens: 12.5, updatedAt: NOW, limits },
      [`key:${without.id}`]: { tokens: 3, updatedAt: NOW },
    })
    // The same limits: nothing goes.
    expect(await a.keys.setPlan(without.id, 'free', { rpm: without.rpm, rpd: without.rpd })).toBe(true)
    expect(Object.keys(await saved())).toHaveLength(2)
    // Other limits: the bucket without limits goes; the one with them says they were others.
    expect(await a.keys.setPlan(without.id, 'pro', { rpm: 300, rpd: 10_000 })).toBe(true)
    expect(await a.keys.setPlan(withLimits.id, 'pro', { rpm: 300, rpd: 10_000 })).toBe(true)
    expect(await saved()).toEqual({ [`key:${withLimits.id}`]: { tokens: 12.5, updatedAt: NOW, limits } })
  })

  test(`${name}: a limit reset is reported once, with the key's saved day bucket gone; a revoked key's is refused`, async () => {
    const { a } = await backend.fresh()
    const { record } = makeKey({ plan: 'free' }, NOW)
    await a.keys.insert(record)
    await a.limiterState.save(
      new Map([
        [`key:${record.id}`, { tokens: 12.5, updatedAt: NOW }],
        ['key:other', { tokens: 3, updatedAt: NOW }],
      ]),
    )
    expect(await a.keys.takeLimitResets()).toEqual([])
    expect(await a.keys.resetLimits(record.id, NOW)).toBe(true)
    expect(await a.keys.resetLimits('key_missing', NOW)).toBe(false)
    expect((await a.keys.takeLimitResets()).map((reset) => reset.keyId)).toEqual([record.id])
    expect(await a.keys.takeLimitResets()).toEqual([])
    expect([...(await a.limiterState.load())]).toEqual([['key:other', { tokens: 3, updatedAt: NOW }]])
    // A revoked key has no limits to reset.
    await a.keys.revoke(record.id, NOW + 1)
    expect(await a.keys.resetLimits(record.id, NOW + 2)).toBe(false)
    expect(await a.keys.takeLimitResets()).toEqual([])
  })

  test(`${name}: a key's plan is changed as a change other handles read, with its limits; a missing or revoked key is refused`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const { record } = makeKey({ plan: 'free', name: 'app' }, NOW)
    await a.keys.insert(record)
    const before = await other.keys.changesSince(-1)
    expect(await a.keys.setPlan(record.id, 'enterprise', { rpm: 7, rpd: 700 })).toBe(true)
    const changed = await other.keys.changesSince(before.last)
    expect(changed.records).toEqual([changeOf({ ...record, plan: 'enterprise', rpm: 7, rpd: 700 })])
    expect(await other.keys.list()).toEqual([{ ...record, plan: 'enterprise', rpm: 7, rpd: 700 }])
    expect(await a.keys.setPlan('key_missing', 'pro', { rpm: 300, rpd: 10_000 })).toBe(false)
    await a.keys.revoke(record.id, NOW + 1)
    const revoked = await other.keys.changesSince(changed.last)
    expect(await a.keys.setPlan(record.id, 'pro', { rpm: 300, rpd: 10_000 })).toBe(false)
    expect(await other.keys.changesSince(revoked.last)).toEqual({ records: [], last: revoked.last })
  })

  test(`${name}: usage added through two handles at once is summed per minute and per hour, read per key and per bucket, and pruned`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const hour = Math.floor(NOW / HOUR_MS) * HOUR_MS + 5 * HOUR_MS
    // Each batch: key A in two minutes of one hour (a deprecated call in the second), the keyless bucket in
    // the next hour in two rows of one minute (as a batch given back after a failed write holds); every
    // counter of A's first row set, so a column written or read in the wrong place shows.
    const batch = (): UsageRow[] => [
      { at: hour, keyId: 'key_a', counts: Array.from({ length: COUNTERS }, (_, i) => i + 1) },
      { at: hour + MINUTE_MS, keyId: 'key_a', counts: counts({ [OK]: 2, [DEPRECATED]: 1, [FIRST_LATENCY + 3]: 2 }) },
      { at: hour + HOUR_MS, keyId: NO_KEY, counts: counts({ [LIMITED]: 1 }) },
      { at: hour + HOUR_MS, keyId: NO_KEY, counts: counts({ [FIRST_LATENCY]: 1 }) },
    ]
    const keyless = counts({ [LIMITED]: 1, [FIRST_LATENCY]: 1 })
    await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? a : other).usage.add(batch())))
    const times = (row: number[], n: number) => row.map((value) => value * n)
    const first = batch()[0]!.counts
    const second = batch()[1]!.counts

    expect(await other.usage.series('minute', hour, 'key_a')).toEqual([
      { at: hour, keyId: 'key_a', counts: times(first, 10) },
      { at: hour + MINUTE_MS, keyId: 'key_a', counts: times(second, 10) },
    ])
    expect(await a.usage.series('hour', 0)).toEqual([
      { at: hour, keyId: NO_KEY, counts: first.map((value, i) => (value + second[i]!) * 10) },
      { at: hour + HOUR_MS, keyId: NO_KEY, counts: times(keyless, 10) },
    ])
    expect(await a.usage.totals('minute', hour + MINUTE_MS)).toEqual([
      { keyId: NO_KEY, counts: times(keyless, 10), lastAt: hour + HOUR_MS, lastDeprecatedAt: null },
      { keyId: 'key_a', counts: times(second, 10), lastAt: hour + MINUTE_MS, lastDeprecatedAt: hour + MINUTE_MS },
    ])
    expect((await a.usage.totals('hour', hour)).map((t) => [t.keyId, t.lastAt, t.lastDeprecatedAt])).toEqual([
      [NO_KEY, hour + HOUR_MS, null],
      ['key_a', hour, hour],
    ])
    // Of one key: its sums alone.
    expect(await a.usage.totals('minute', hour + MINUTE_MS, 'key_a')).toEqual([
      { keyId: 'key_a', counts: times(second, 10), lastAt: hour + MINUTE_MS, lastDeprecatedAt: hour + MINUTE_MS },
    ])
    expect(await a.usage.totals('minute', hour + MINUTE_MS, 'key_none')).toEqual([])

    expect(await a.usage.prune('minute', hour + MINUTE_MS)).toBe(1)
    expect((await a.usage.series('minute', 0)).map((row) => row.at)).toEqual([hour + MINUTE_MS, hour + HOUR_MS])
    expect(await a.usage.prune('hour', hour + HOUR_MS)).toBe(1)
    expect((await a.usage.series('hour', 0)).map((row) => row.at)).toEqual([hour + HOUR_MS])
  })

  test(`${name}: seeding and resetting change the generation other handles see`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const start = await other.pets.generation()
    await a.pets.seed([pet('s1'), pet('s2')], NOW)
    const seeded = await other.pets.generation()
    expect(seeded).not.toBe(start)
    expect(await other.pets.count()).toBe(2)
    await create(a, [withKey('Rex', 'k')])
    expect(await a.pets.reset()).toBe(3)
    expect(await other.pets.generation()).not.toBe(seeded)
    expect(await other.pets.count()).toBe(0)
    // Idempotency records went with the pets: the key creates again.
    expect((await create(a, [withKey('Rex', 'k')]))[0]!.kind).toBe('created')
  })

  test(`${name}: sign-in attempts are counted per client address first: another address may still try, until the name's own bound`, async () => {
    const { a } = await backend.fresh()
    const since = NOW - 15 * MINUTE_MS
    const from = (address: string) => ({ address, since, perAddress: 2, perName: 5 })
    expect(await a.operators.reserveSignIn('eve', NOW, from('198.51.100.1'))).toBeNull()
    expect(await a.operators.reserveSignIn('eve', NOW + 1, from('198.51.100.1'))).toBeNull()
    // Its two spent, the first address is refused until the older leaves the window; a read says the same.
    expect(await a.operators.reserveSignIn('eve', NOW + 2, from('198.51.100.1'))).toBe(NOW)
    expect(await a.operators.signInBlocked('eve', from('198.51.100.1'))).toBe(NOW)
    expect(await a.operators.signInBlocked('eve', from('198.51.100.2'))).toBeNull()
    for (const [i, address] of ['198.51.100.2', '198.51.100.2', '198.51.100.3'].entries())
      expect(await a.operators.reserveSignIn('eve', NOW + 10 + i, from(address))).toBeNull()
    // Five for the name from all together: every address is refused, a new one too.
    expect(await a.operators.reserveSignIn('eve', NOW + 20, from('198.51.100.4'))).toBe(NOW)
    expect(await a.operators.signInBlocked('eve', from('198.51.100.4'))).toBe(NOW)
    expect(await a.operators.reserveSignIn('ann', NOW + 20, from('198.51.100.4'))).toBeNull()
  })

  test(`${name}: sign-in attempts reserved through two handles at once: at most the limit, a release frees one, the window frees the oldest`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const since = NOW - 15 * MINUTE_MS
    const answers = await Promise.all(
      Array.from({ length: 32 }, (_, i) =>
        Promise.resolve((i % 2 ? a : other).operators.reserveSignIn('eve', NOW + i, signInThrottle(since, 5))),
      ),
    )
    expect(answers.filter((answer) => answer === null)).toHaveLength(5)
    const refused = answers.filter((answer): answer is number => answer !== null)
    expect(refused).toHaveLength(27)
    // Refused with the oldest of the five counted: its leaving the window frees a place.
    const reserved = answers.map((answer, i) => (answer === null ? NOW + i : null)).filter((at): at is number => at !== null)
    expect(new Set(refused)).toEqual(new Set([reserved[0]!]))
    // Another name is apart.
    expect(await a.operators.reserveSignIn('ann', NOW, signInThrottle(since, 5))).toBeNull()
    await other.operators.releaseSignIn('eve', reserved[4]!)
    expect(await a.operators.reserveSignIn('eve', NOW + 100, signInThrottle(since, 5))).toBeNull()
    expect(await a.operators.reserveSignIn('eve', NOW + 101, signInThrottle(since, 5))).toBe(reserved[0]!)
    // Once the oldest is out of the window, one more is let through.
    expect(await a.operators.reserveSignIn('eve', NOW + 102, signInThrottle(reserved[0]!, 5))).toBeNull()
  })

  test(`${name}: a session is stored only against the current password hash; unknown names count in one audit entry; pruning`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    expect(await a.operators.add('eve', 'hash-1', NOW)).toBe(true)
    expect(await other.operators.setPassword('eve', 'hash-2')).toBe(true)
    expect(await a.operators.addCredential('s-old', 'eve', 'session', NOW, 'hash-1')).toBe(false)
    expect(await a.operators.addCredential('s-new', 'eve', 'session', NOW, 'hash-2')).toBe(true)
    expect(await a.operators.addCredential('t', 'eve', 'token', NOW)).toBe(true)
    expect(await other.operators.credential('s-old')).toBeNull()
    expect(await other.operators.credential('s-new')).toEqual({ operator: 'eve', kind: 'session', lastSeenAt: NOW })
    // Touched only when its last use is older than asked: once per interval.
    await a.operators.touchCredential('s-new', NOW + 1_000, NOW)
    expect((await other.operators.credential('s-new'))!.lastSeenAt).toBe(NOW)
    await a.operators.touchCredential('s-new', NOW + 6_000, NOW + 1_000)
    expect((await other.operators.credential('s-new'))!.lastSeenAt).toBe(NOW + 6_000)

    await a.operators.audit({ at: NOW, actor: 'eve', action: 'key.create', target: 'key_1' })
    await Promise.all(
      Array.from({ length: 30 }, (_, i) => Promise.resolve((i % 2 ? a : other).operators.countUnknownSignIn(NOW + i, NOW - 1))),
    )
    expect(await a.operators.auditLog(200)).toEqual([
      { at: expect.any(Number), actor: '(unknown names)', action: 'operator.sign-in-refused', target: '30' },
      { at: NOW, actor: 'eve', action: 'key.create', target: 'key_1' },
    ])
    // A new day starts a new entry.
    await a.operators.countUnknownSignIn(NOW + DAY_MS, NOW + DAY_MS)
    expect((await a.operators.auditLog(1))[0]).toMatchObject({ target: '1', at: NOW + DAY_MS })

    expect(await a.operators.reserveSignIn('eve', NOW, signInThrottle(NOW - 1, 5))).toBeNull()
    await other.operators.prune(NOW + 6_001, NOW, NOW + DAY_MS)
    // The idle session went, the token stayed; the attempt went; refused sign-ins before the cut went.
    expect(await a.operators.credential('s-new')).toBeNull()
    expect(await a.operators.credential('t')).toMatchObject({ kind: 'token' })
    expect(await a.operators.reserveSignIn('eve', NOW + 1, signInThrottle(NOW - 1, 1))).toBeNull()
    expect((await a.operators.auditLog(200)).map((entry) => entry.target)).toEqual(['1', 'key_1'])
  })

  test(`${name}: the first operator is made once by handles at the same moment; a name is added once; removing one ends their credentials`, async () => {
    const { a, b } = await backend.fresh()
    const other = await b()
    const firsts = await Promise.all(
      Array.from({ length: 30 }, (_, i) => Promise.resolve((i % 2 ? a : other).operators.addIfNone(`first-${i}`, `hash-${i}`, NOW + i))),
    )
    expect(firsts.filter(Boolean)).toHaveLength(1)
    const first = `first-${firsts.indexOf(true)}`
    expect(await other.operators.addIfNone('late', 'hash', NOW)).toBe(false)
    const adds = await Promise.all(
      Array.from({ length: 30 }, (_, i) => Promise.resolve((i % 2 ? a : other).operators.add('eve', `hash-${i}`, NOW + 1))),
    )
    expect(adds.filter(Boolean)).toHaveLength(1)
    expect(await other.operators.list()).toEqual([
      { name: 'eve', createdAt: NOW + 1 },
      { name: first, createdAt: NOW + firsts.indexOf(true) },
    ])
    // The oldest operator is the first made, unless eve (made at NOW + 1) came before it or with it (names break ties).
    const eve = `hash-${adds.indexOf(true)}`
    const oldest = firsts.indexOf(true) === 0 ? 'hash-0' : eve
    expect(await a.operators.passwordHashes('eve')).toEqual({ hash: eve, oldest })
    expect(await a.operators.passwordHashes('nobody')).toEqual({ hash: null, oldest })
    expect(await a.operators.setPassword('nobody', 'hash')).toBe(false)
    expect(await a.operators.addCredential('s-nobody', 'nobody', 'session', NOW)).toBe(false)

    expect(await a.operators.addCredential('s-1', 'eve', 'session', NOW)).toBe(true)
    expect(await a.operators.addCredential('s-2', 'eve', 'session', NOW)).toBe(true)
    expect(await a.operators.addCredential('t-1', 'eve', 'token', NOW)).toBe(true)
    // A new token replaces the old one; sessions stay.
    expect(await other.operators.addCredential('t-2', 'eve', 'token', NOW)).toBe(true)
    expect(await a.operators.credential('t-1')).toBeNull()
    expect(await a.operators.credential('s-1')).toMatchObject({ operator: 'eve', kind: 'session' })
    await other.operators.endCredential('s-1')
    expect(await a.operators.credential('s-1')).toBeNull()

    expect(await other.operators.remove('eve')).toBe(true)
    expect(await other.operators.remove('eve')).toBe(false)
    expect(await a.operators.credential('s-2')).toBeNull()
    expect(await a.operators.credential('t-2')).toBeNull()
    expect((await a.operators.list()).map((operator) => operator.name)).toEqual([first])
  })
}

describe('storage conformance', () => {
  conformance('sqlite', sqlite)

  test('sqlite: the changed keys are found by a search of the index on change numbers, not a scan of every key', async () => {
    const file = join(tempDir(), 'petstore.db')
    await track(openSqliteStorage(file))
    const db = new Database(file, { readonly: true })
    const changes = keyChangesAfter(0)
    const plan = db
      .query<{ detail: string }, [number, number]>(`EXPLAIN QUERY PLAN ${changes.text('sqlite')}`)
      .all(...(changes.values as [number, number]))
      .map((step) => step.detail)
    db.close()
    expect(plan).toEqual(['SEARCH api_keys USING INDEX api_keys_by_change (change>?)'])
  })
})

describeWithEngines(['postgresql'], 'storage conformance on PostgreSQL', () => {
  // Declared before the cluster, so the handles close before PostgreSQL stops.
  afterAll(async () => {
    for (const storage of opened.splice(0)) await storage.close()
  })
  cluster = postgresForSuite()
  conformance('postgres', postgres)

  test('postgres: a create waiting for the pet-id lock gives up as unavailable instead of waiting without end', async () => {
    const url = await cluster.createDatabase('held_lock')
    const storage = await track(openPostgresStorage(url, { pool: 1 }))
    const holder = new Bun.SQL(url, { max: 1 })
    try {
      await holder.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${LOCKS.petIds})`
        const started = Date.now()
        await expect(create(storage, [{ pet: pet('waits') }])).rejects.toBeInstanceOf(StorageUnavailableError)
        expect(Date.now() - started).toBeLessThan(8_000)
      })
      expect((await create(storage, [{ pet: pet('after') }]))[0]!.kind).toBe('created')
    } finally {
      await holder.close()
    }
  }, 30_000)

  test('postgres: a database written by a newer petstore is refused with one line, and left as it is', async () => {
    const url = await cluster.createDatabase('newer_schema')
    await (await track(openPostgresStorage(url, { pool: 1 }))).close()
    const admin = new Bun.SQL(url, { max: 1 })
    try {
      await admin`INSERT INTO petstore_schema (version) VALUES (99)`
      const refused = openPostgresStorage(url, { pool: 1 })
      await expect(refused).rejects.toBeInstanceOf(StorageOpenError)
      await expect(refused).rejects.toThrow(
        /^the database at postgres:\/\/postgres@127\.0\.0\.1:\d+\/newer_schema was written by a newer petstore \(schema 99, this one knows up to \d+\); run that newer petstore, or go back to this version by restoring the dump taken before the upgrade \(pg_restore, every instance stopped; see docs\/upgrading\.md\)$/,
      )
      expect((await admin`SELECT max(version) AS v FROM petstore_schema`)[0].v).toBe(99)
    } finally {
      await admin.close()
    }
  })
})
