/**
 * Where a store's first secrets go: one file per store, so a store never replaces or removes another's
 * (a PostgreSQL database tried in the folder of a data file, two clusters behind sockets, names that a
 * file name cannot hold as they are).
 */
import { expect, test } from 'bun:test'
import { basename } from 'node:path'
import { secretFile } from '../../src/cmd/bootstrap-key'

const fileOf = (url: string | null) => basename(secretFile('./data/petstore.db', url, 'bootstrap-key.txt'))

test('the data file, and each PostgreSQL database, has a file of its own; the same database the same one', () => {
  expect(fileOf(null)).toBe('petstore-bootstrap-key.txt')
  expect(fileOf('postgres://app:secret@127.0.0.1:5432/petstore')).toBe('petstore-postgres-127.0.0.1-5432-petstore-bootstrap-key.txt')
  expect(fileOf('postgres://other@127.0.0.1:5432/petstore')).toBe(fileOf('postgres://app:secret@127.0.0.1:5432/petstore'))
  // No database: PostgreSQL takes the user's name.
  expect(fileOf('postgres://pg@127.0.0.1:5432')).toBe('petstore-postgres-127.0.0.1-5432-pg-bootstrap-key.txt')
  const distinct = [
    null,
    'postgres://127.0.0.1:5432/petstore',
    'postgres://127.0.0.1:5433/petstore',
    'postgres:///shop?host=/run/a&port=5432',
    'postgres:///shop?host=/run/b&port=5432',
    'postgres://h/a%2Fb',
    'postgres://h/a_b',
    'postgres://h/pet%20store',
    'postgres://h/pet_store',
  ].map(fileOf)
  expect(new Set(distinct).size).toBe(distinct.length)
  for (const file of distinct) expect(file).toMatch(/^[A-Za-z0-9._-]+$/)
})
