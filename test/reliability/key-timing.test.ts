/**
 * Key lookup must not leak by timing how much of a guess was right. The registry hashes the whole
 * secret before looking it up, so a wrong key sharing all but its last character with a real one must
 * take as long as a wrong key sharing nothing. A deliberately leaky comparator run through the same
 * measurement shows the measurement can see a prefix leak, so this test can fail.
 */
import { expect, test } from 'bun:test'
import { createKey, KeyRegistry } from '../../src/modules/keys/service'
import { openSqliteStorage } from '../../src/storage/sqlite'

const BATCHES = 120
const CALLS = 2_000

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

/** Relative difference of the median batch times of two inputs, measured in alternating batches. */
function relativeGap(lookup: (guess: string) => unknown, near: string[], far: string[]): number {
  const times = { near: [] as number[], far: [] as number[] }
  for (let batch = 0; batch < BATCHES; batch++) {
    const order = batch % 2 === 0 ? (['near', 'far'] as const) : (['far', 'near'] as const)
    for (const which of order) {
      const guesses = which === 'near' ? near : far
      const start = Bun.nanoseconds()
      for (let i = 0; i < CALLS; i++) lookup(guesses[i % guesses.length]!)
      times[which].push(Bun.nanoseconds() - start)
    }
  }
  return (median(times.near) - median(times.far)) / median(times.far)
}

function wrongKeys(secret: string) {
  const last = (text: string, i: number) => text.slice(0, -1) + 'ABCDEFGHIJ'[i % 10]
  const near = Array.from({ length: 10 }, (_, i) => last(secret, i)).filter((guess) => guess !== secret)
  // The same shape (prefix, alphabet, length), so both take the same path: the checksum, then the hash.
  const far = near.map((guess) => `psk_${'x'.repeat(guess.length - 5)}${guess.at(-1)}`)
  return { near, far }
}

test('a wrong key sharing a long prefix with a real one takes no longer to refuse than any other', async () => {
  const storage = openSqliteStorage(':memory:')
  const { secret } = await createKey(storage.keys, { plan: 'pro' }, Date.now())
  const registry = new KeyRegistry(storage)
  await registry.reload()
  const { near, far } = wrongKeys(secret)
  for (const guess of [...near, ...far]) expect(registry.find(guess)).toBeUndefined()

  const gap = relativeGap((guess) => registry.find(guess), near, far)
  console.log(`key timing: near-prefix vs no-prefix median gap ${(gap * 100).toFixed(1)} %`)
  expect(Math.abs(gap)).toBeLessThan(0.25)
  storage.close()
})

test('the measurement does detect a comparison that stops at the first wrong character', () => {
  const secret = `psk_${'k'.repeat(43)}`
  let sink = 0
  const leaky = (guess: string) => {
    for (let i = 0; i < guess.length; i++) {
      if (guess[i] !== secret[i]) return false
      for (let spin = 0; spin < 20; spin++) sink += spin
    }
    return true
  }
  const { near, far } = wrongKeys(secret)
  const gap = relativeGap(leaky, near, far)
  console.log(`key timing control: leaky comparator gap ${(gap * 100).toFixed(1)} % (sink ${sink > 0})`)
  expect(gap).toBeGreaterThan(0.25)
})
