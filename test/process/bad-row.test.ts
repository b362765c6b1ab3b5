/**
 * One row that storage refuses never fails the other creates of its batch, on either backend: the
 * store is made to refuse one name for real (a trigger added to the data file, or to the throwaway
 * database), and creates sent together with it are still created, answered 201, and replayable. A
 * PostgreSQL database whose encoding cannot hold every name is refused at start, with one line.
 */
import { Database } from 'bun:sqlite'
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { join } from 'node:path'
import { cli, createKeyWithCli, startServer, tempDir } from '../support/binary'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'
import { killSpawned, listAll, postPet, serveExpectingFailure } from './helpers'

afterAll(killSpawned)
setDefaultTimeout(60_000)

const POISON = 'poison'
const ROUNDS = 3
const PER_ROUND = 40
const UNLIMITED = ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000']

/**
 * Rounds of creates sent all at once, one of them the refused name: every other create is 201, the
 * refused one a 500 that says the server failed (not the client), and replays answer the same bytes.
 */
async function createsAroundARefusedRow(base: string, key: string): Promise<void> {
  const answered: { name: string; idempotencyKey: string; status: number; body: string }[] = []
  for (let round = 0; round < ROUNDS; round++) {
    const names = Array.from({ length: PER_ROUND }, (_, i) => (i === PER_ROUND / 2 ? POISON : `pet ${round}.${i}`))
    const responses = await Promise.all(
      names.map((name, i) => postPet(base, key, { name, categoryId: 1 }, { 'idempotency-key': `${round}-${i}` })),
    )
    for (const [i, response] of responses.entries())
      answered.push({ name: names[i]!, idempotencyKey: `${round}-${i}`, status: response.status, body: await response.text() })
  }
  const innocent = answered.filter((answer) => answer.name !== POISON)
  expect(innocent.filter((answer) => answer.status !== 201).map((answer) => `${answer.name}: ${answer.status} ${answer.body}`)).toEqual([])
  for (const refused of answered.filter((answer) => answer.name === POISON)) {
    expect(refused.status).toBe(500)
    expect(JSON.parse(refused.body)).toEqual({ code: 'internal_error', message: expect.any(String), status: 500 })
  }
  // Every innocent pet exactly once, in id order, and nothing of the refused one.
  const listed = await listAll(base, key)
  expect(listed.map((pet) => pet.name).sort()).toEqual(innocent.map((answer) => answer.name).sort())
  expect(listed.map((pet) => pet.id)).toEqual(listed.map((pet) => pet.id).sort((a, b) => a - b))
  // The Idempotency-Keys were kept with the pets: a replay answers the first bytes and creates nothing.
  const replays = await Promise.all(
    innocent
      .slice(0, PER_ROUND)
      .map((answer) => postPet(base, key, { name: answer.name, categoryId: 1 }, { 'idempotency-key': answer.idempotencyKey })),
  )
  expect(await Promise.all(replays.map((response) => response.text()))).toEqual(innocent.slice(0, PER_ROUND).map((answer) => answer.body))
  expect(await listAll(base, key)).toHaveLength(listed.length)
}

describe('one refused row in a batch, on the data file', () => {
  test('the other creates sent with it are created and answered 201', async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, UNLIMITED)
    const server = await startServer({ dataFile, args: ['--no-access-log'] })
    // Planted once the server has opened the file, which refuses a trigger it does not make.
    const db = new Database(dataFile)
    db.run(
      `CREATE TRIGGER refuse_poison BEFORE INSERT ON pets WHEN NEW.name = '${POISON}' BEGIN SELECT RAISE(ABORT, 'this name is refused'); END`,
    )
    db.close()
    await createsAroundARefusedRow(server.base, key)
    await server.said('this name is refused')
    expect(await server.stop()).toBe(0)
  })
})

describeWithEngines(['postgresql'], 'one refused row in a batch, on PostgreSQL', () => {
  const cluster = postgresForSuite()

  test('the other creates sent with it are created and answered 201', async () => {
    const databaseUrl = await cluster.createDatabase('bad_row')
    const created = cli(['keys', 'create', '--database-url', databaseUrl, ...UNLIMITED])
    expect(created.code).toBe(0)
    const key = created.stdout.trim().split('\n').at(-1)!
    const admin = new Bun.SQL(databaseUrl, { max: 1 })
    try {
      await admin.unsafe(`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
                          BEGIN RAISE EXCEPTION 'this name is refused'; END $$;
                          CREATE TRIGGER refuse_poison BEFORE INSERT ON pets FOR EACH ROW
                          WHEN (NEW.name = '${POISON}') EXECUTE FUNCTION refuse_poison()`)
    } finally {
      await admin.close()
    }
    const server = await startServer({ databaseUrl, args: ['--no-access-log'] })
    await createsAroundARefusedRow(server.base, key)
    await server.said('this name is refused')
    expect(await server.stop()).toBe(0)
  })

  test('a LATIN1 database is refused at start with one line, and left untouched', async () => {
    const databaseUrl = await cluster.createDatabase('latin1', 'LATIN1')
    const line = new RegExp(
      `^petstore: the database at ${databaseUrl.replace(/[.]/g, '\\.')} uses the LATIN1 encoding, which cannot hold every pet name; ` +
        'petstore needs a UTF8 database \\(createdb -E UTF8 -T template0 NAME\\)\\n$',
    )
    const served = await serveExpectingFailure(['--port', '0', '--database-url', databaseUrl])
    expect(served.listened).toBe(false)
    expect(served.code).toBe(1)
    expect(served.stderr).toMatch(line)
    const listed = cli(['keys', 'list', '--database-url', databaseUrl])
    expect(listed.code).toBe(1)
    expect(listed.stderr).toMatch(line)
    const admin = new Bun.SQL(databaseUrl, { max: 1 })
    try {
      expect(await admin`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`).toEqual([])
    } finally {
      await admin.close()
    }
  })
})
