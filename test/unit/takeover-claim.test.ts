/**
 * Takeovers started together, over real processes that find the running server and claim the file as
 * `serve --takeover` does (test/fixtures/takeover-claimant.ts): exactly one claims it, whatever claim a
 * killed taker left, and the others are refused. (Before the takers' lock, two that both found a dead
 * claim could each remove it, the second removing the first's new claim, and both go ahead.)
 */
import { expect, test } from 'bun:test'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { lockDataFile } from '../../src/storage/sqlite/data-file-lock'
import { createKeyWithCli, eventually, tempDir } from '../support/binary'

const TAKERS = 6
const ROUNDS = 10
const CLAIMANT = join(import.meta.dir, '../fixtures/takeover-claimant.ts')

/** A process id that is nobody's: a process that has ended. */
async function deadPid(): Promise<number> {
  const gone = Bun.spawn(['true'])
  await gone.exited
  return gone.pid
}

async function round(leftover: number | null): Promise<{ said: string[]; claimant: number | undefined; claim: string }> {
  const dir = tempDir()
  const file = join(dir, 'petstore.db')
  const go = join(dir, 'go')
  // The running server, as the takers see it: this process holds the data file's lock.
  createKeyWithCli(file, ['--plan', 'pro'])
  const running = lockDataFile(file)!
  if (leftover !== null) writeFileSync(`${file}.takeover`, String(leftover), { mode: 0o600 })
  const takers = Array.from({ length: TAKERS }, () =>
    Bun.spawn(['bun', CLAIMANT, file, go], { stdin: 'pipe', stdout: 'pipe', stderr: 'inherit' }),
  )
  const lines = takers.map(() => [] as string[])
  const readers = takers.map(async (taker, i) => {
    let text = ''
    for await (const chunk of taker.stdout) {
      text += new TextDecoder().decode(chunk)
      lines[i] = text.split('\n').filter(Boolean)
    }
  })
  try {
    await eventually(() => lines.every((said) => said[0] === 'ready'), 30_000)
    writeFileSync(go, '')
    await eventually(() => lines.every((said) => said.length >= 2), 30_000)
    const said = lines.map((lines) => lines[1]!)
    return {
      said,
      claimant: takers[said.findIndex((line) => line.startsWith('claimed'))]?.pid,
      claim: readFileSync(`${file}.takeover`, 'utf8'),
    }
  } finally {
    for (const taker of takers) taker.stdin.end()
    await Promise.all([...takers.map((taker) => taker.exited), ...readers])
    running.release()
    // The one that claimed dropped its claim as it ended.
    expect(existsSync(`${file}.takeover`)).toBe(false)
  }
}

test.each([
  ['a claim left by a killed taker', true],
  ['no claim', false],
])(
  `${TAKERS} takeovers started together, %s: one claims, the others are refused (${ROUNDS} rounds)`,
  async (_, leftover) => {
    for (let i = 0; i < ROUNDS; i++) {
      const { said, claimant, claim } = await round(leftover ? await deadPid() : null)
      // The one that claimed would ask this process, the server holding the file.
      const claimed = said.filter((line) => line.startsWith('claimed'))
      expect({ round: i, claimed }).toEqual({ round: i, claimed: [`claimed ${process.pid}`] })
      for (const line of said.filter((line) => !line.startsWith('claimed')))
        expect(line).toMatch(/^refused: process \d+ is taking over .* already$/)
      expect(claim).toBe(String(claimant))
    }
  },
  120_000,
)
