/**
 * The in-process count of tries (Prefer: fail) on an injected clock: past its bound of 10,000 in all, a
 * new id is refused (TriesFullError, with the time until the oldest count is forgotten) and no other
 * key's count is forgotten; a key at its own bound of 1,000 forgets its own oldest; expired counts make room.
 */
import { expect, test } from 'bun:test'
import { TriesFullError } from '../../src/limiter/backend'
import { futureClock, memoryLimiter } from './stores'

const KEEP_MS = 3_600_000

test('past 10,000 counts a new id is refused, not counted over another key; expired ones make room', async () => {
  const { clock, advance } = futureClock()
  const limiter = memoryLimiter({ now: () => clock.now })
  expect(await limiter.countTry('victim', 'retry', KEEP_MS)).toBe(1)
  advance(1_000)
  for (let group = 0; group < 10; group++)
    for (let id = 0; id < 1_000; id++) if (group * 1_000 + id < 9_999) expect(await limiter.countTry(`flood${group}`, `id${id}`, KEEP_MS)).toBe(1)
  // 10,000 held: one more new id is refused, for as long as the victim's count (the oldest) is kept.
  const refused = await limiter.countTry('flood9', 'one-more', KEEP_MS).catch((error: unknown) => error)
  expect(refused).toBeInstanceOf(TriesFullError)
  expect((refused as TriesFullError).retryAfter).toBe(KEEP_MS / 1_000 - 1)
  // Counts already held go on being counted.
  expect(await limiter.countTry('victim', 'retry', KEEP_MS)).toBe(2)
  expect(await limiter.countTry('flood0', 'id0', KEEP_MS)).toBe(2)
  // A key at its own bound forgets its own oldest for a new id, even with all held.
  expect(await limiter.countTry('flood0', 'id1000', KEEP_MS)).toBe(1)
  expect(await limiter.countTry('flood0', 'id0', KEEP_MS)).toBe(1)
  expect(await limiter.countTry('victim', 'retry', KEEP_MS)).toBe(3)
  // Once the victim's count has expired, the sweep makes room.
  advance(KEEP_MS - 500)
  expect(await limiter.countTry('flood9', 'one-more', KEEP_MS)).toBe(1)
})
