/**
 * docs/clients.md as a reader follows it: its code blocks, taken from the page as written, run against
 * the compiled binary, on the data file and on PostgreSQL. The `ts file=NAME` blocks are saved under
 * their names, the `sh` blocks run in order (the npm install line excepted: the project's own
 * node_modules, with the same packages, stands in for it on this closed network). The recipe must
 * generate the types, type-check, page through Link, wait out real 429s for their Retry-After, run twice
 * in a row without being banned, and keep int64 categories exact both ways.
 */
import { describe, expect, test } from 'bun:test'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cli, createKeyWithCli, eventually, type Server, startServer } from '../support/binary'
import { clientProject, typeCheck } from '../support/client-project'
import { describeWithEngines } from '../support/engines'
import { postgresForSuite } from '../support/postgres'

const ROOT = join(import.meta.dir, '..', '..')
const PAGE = join(ROOT, 'docs', 'clients.md')

interface Block {
  language: string
  file: string | undefined
  code: string
}

/** The page's fenced code blocks, in order. */
function codeBlocks(markdown: string): Block[] {
  return [...markdown.matchAll(/^```(\w+)(?: file=(\S+))?\n([\s\S]*?)^```$/gm)].map(([, language, file, code]) => ({
    language: language!,
    file,
    code: code!,
  }))
}

/** Makes a key on the server's storage with these `keys create` flags, and returns its secret. */
type MakeKey = (flags: string[]) => string

/**
 * Runs the page's recipe against the server: its `sh` blocks in order, with the `ts file=` blocks saved
 * beside them, then checks what it printed, what the server stored and that the code type-checks.
 */
async function recipeAsWritten(server: Server, makeKey: MakeKey): Promise<void> {
  const dir = clientProject()
  const blocks = codeBlocks(readFileSync(PAGE, 'utf8'))
  expect(blocks.map((block) => block.file ?? block.language)).toEqual(['sh', 'client.ts', 'main.ts', 'sh'])
  for (const block of blocks) if (block.file) writeFileSync(join(dir, block.file), block.code)

  // Sixty requests a minute, spent just before main.ts runs: each of its requests meets a real 429 and
  // waits for its Retry-After. The server bans at the second 429 within a minute that a client sends
  // before the time the last one named (--ban-after 1): a client that waits never is.
  const key = makeKey(['--plan', 'enterprise', '--rpm', '60', '--rpd', '1000'])
  // A second key, made after it, to read with: once the server takes this one, it knows both.
  const reader = { authorization: `Bearer ${makeKey(['--plan', 'pro'])}` }
  await eventually(async () => (await fetch(`${server.base}/pets`, { headers: reader })).status === 200, 30_000)
  const spend = async () => {
    while ((await fetch(`${server.base}/pets?limit=1`, { headers: { authorization: `Bearer ${key}` } })).status !== 429);
  }
  const env = { ...process.env, NO_COLOR: '1', PETSTORE_ORIGIN: server.origin, PETSTORE_KEY: key }
  const outputs: { command: string; code: number; stdout: string; stderr: string }[] = []
  const shell = async (command: string) => {
    const run = Bun.spawn(['sh', '-c', command], { cwd: dir, env, stdout: 'pipe', stderr: 'pipe' })
    const [stdout, stderr, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited])
    outputs.push({ command, code, stdout, stderr })
    expect({ command, code, stderr: code === 0 ? '' : stderr }).toEqual({ command, code: 0, stderr: '' })
  }
  for (const block of blocks.filter((b) => b.language === 'sh')) {
    for (const command of block.code.split('\n').filter((line) => line.trim() && !line.startsWith('npm install'))) {
      if (command === 'bun main.ts') await spend()
      await shell(command)
    }
  }
  const main = outputs.at(-1)!
  expect(main.command).toBe('bun main.ts')
  expect(main.stdout.trim().split('\n')).toEqual([
    'created 1, 2 and 3',
    '1 Big 9223372036854775807 available',
    '2 Small -9223372036854775808 pending',
    '3 Odd 9007199254740993 available',
  ])
  // Run again at once, as a developer does: every wait is a token's (1 s), never a ban's.
  await shell('bun main.ts')
  const again = outputs.at(-1)!
  expect(again.stdout.trim().split('\n')).toEqual([
    'created 4, 5 and 6',
    '1 Big 9223372036854775807 available',
    '2 Small -9223372036854775808 pending',
    '3 Odd 9007199254740993 available',
    '4 Big 9223372036854775807 available',
    '5 Small -9223372036854775808 pending',
    '6 Odd 9007199254740993 available',
  ])
  for (const { stderr } of [main, again]) {
    const waits = stderr.trim().split('\n')
    expect(waits.length).toBeGreaterThanOrEqual(3)
    for (const line of waits) expect(line).toBe('petstore: 429, waiting 1 s as Retry-After says')
  }

  // Stored exactly, as the server itself answers them.
  const page = await fetch(`${server.base}/pets?limit=100`, { headers: reader })
  const text = await page.text()
  for (const digits of ['9223372036854775807', '-9223372036854775808', '9007199254740993'])
    expect(text).toContain(`"categoryId":${digits},`)

  // And the code the page shows type-checks against the generated types, strictly.
  const checked = typeCheck(dir, ['main.ts', 'client.ts', 'petstore.d.ts'])
  expect(checked.output).toBe('')
  expect(checked.code).toBe(0)
}

const TITLE = 'its recipe, run as written, generates a typed client that pages, waits out a 429 and keeps int64 exact'

describe('docs/clients.md on the data file', () => {
  test(TITLE, async () => {
    const server = await startServer({ args: ['--no-access-log', '--ban-after', '1'] })
    try {
      await recipeAsWritten(server, (flags) => createKeyWithCli(server.dataFile, flags))
    } finally {
      await server.stop()
    }
  }, 120_000)
})

describeWithEngines(['postgresql'], 'docs/clients.md on PostgreSQL', () => {
  const cluster = postgresForSuite()

  test(TITLE, async () => {
    const databaseUrl = await cluster.createDatabase('clients_doc')
    const server = await startServer({ databaseUrl, args: ['--no-access-log', '--ban-after', '1'] })
    const makeKey: MakeKey = (flags) => {
      const created = cli(['keys', 'create', '--database-url', databaseUrl, ...flags])
      expect(created.code).toBe(0)
      return created.stdout.trim().split('\n').at(-1)!
    }
    try {
      await recipeAsWritten(server, makeKey)
    } finally {
      await server.stop()
    }
  }, 120_000)
})
