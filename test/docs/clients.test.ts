/**
 * docs/clients.md as a reader follows it: its code blocks, taken from the page as written, run against
 * the compiled binary, on the data file and on PostgreSQL. The `ts file=NAME` blocks are saved under
 * their names, the `sh` blocks run in order (the npm install line excepted: the project's own
 * node_modules, with the same packages, stands in for it on this closed network). The recipe must
 * generate the types, type-check, page through Link, wait out a real 429 for its Retry-After and keep
 * int64 categories exact both ways; and, run twice in a row on a key spent to its last token, wait a
 * token's second each time, never a ban's.
 */
import { describe, expect, test } from 'bun:test'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cli, eventually, type Server, startServer } from '../support/binary'
import { clientProject } from '../support/client-project'
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

/** Runs a command on the server's storage (its data file or database) and returns its last line of stdout. */
type OnStorage = (args: string[]) => string

/** Runs a command of the binary, which must succeed, and returns its last line of stdout (a key's secret). */
function storageCommand(args: string[]): string {
  const result = cli(args)
  expect({ args, code: result.code, stderr: result.code === 0 ? '' : result.stderr }).toEqual({ args, code: 0, stderr: '' })
  return result.stdout.trim().split('\n').at(-1) ?? ''
}

interface Output {
  command: string
  code: number
  stdout: string
  stderr: string
}

/**
 * What the page's tsc line answered, by the command and the files it reads: the recipe on PostgreSQL
 * generates a petstore.d.ts byte for byte the one on the data file (the same document), and tsc's answer
 * depends on nothing else, so it is run once for the two (about ten seconds of CPU); a file that differs
 * is checked again.
 */
const typeChecks = new Map<string, Output>()
const TYPE_CHECKED = ['main.ts', 'client.ts', 'petstore.d.ts']

/**
 * Runs the page's recipe against the server: its `sh` blocks in order, with the `ts file=` blocks saved
 * beside them, then checks what it printed, what the server stored and that the code type-checks.
 */
async function recipeAsWritten(server: Server, onStorage: OnStorage, { twice = false } = {}): Promise<void> {
  const dir = clientProject()
  const blocks = codeBlocks(readFileSync(PAGE, 'utf8'))
  expect(blocks.map((block) => block.file ?? block.language)).toEqual(['sh', 'client.ts', 'main.ts', 'sh', 'sh'])
  for (const block of blocks) if (block.file) writeFileSync(join(dir, block.file), block.code)

  // The README's staging store and `ci` key: 250 sample pets, five requests a minute. main.ts makes
  // six (three creates, three pages of 100), so its last one meets a real 429 and must wait for its
  // Retry-After.
  onStorage(['pets', 'seed', '--count', '250'])
  const key = onStorage(['keys', 'create', '--plan', 'enterprise', '--rpm', '5', '--rpd', '1000', '--name', 'ci'])
  // A second key, made after it, to read with: once the server takes this one, it knows both.
  const reader = { authorization: `Bearer ${onStorage(['keys', 'create', '--plan', 'pro'])}` }
  await eventually(async () => (await fetch(`${server.base}/pets`, { headers: reader })).status === 200, 30_000)
  const outputs: Output[] = []
  const shell = async (command: string, secret = key) => {
    const checks = command.startsWith('npx --yes tsc ')
    const input = checks ? JSON.stringify([command, ...TYPE_CHECKED.map((file) => readFileSync(join(dir, file), 'utf8'))]) : ''
    let output = checks ? typeChecks.get(input) : undefined
    if (output) console.log(`${command}: the same files as checked before, so its answer then (exit ${output.code})`)
    else {
      const env = { ...process.env, NO_COLOR: '1', PETSTORE_ORIGIN: server.origin, PETSTORE_KEY: secret }
      const run = Bun.spawn(['sh', '-c', command], { cwd: dir, env, stdout: 'pipe', stderr: 'pipe' })
      const [stdout, stderr, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited])
      output = { command, code, stdout, stderr }
      if (checks) typeChecks.set(input, output)
    }
    outputs.push(output)
    const { code, stdout, stderr } = output
    expect({ command, code, stderr: code === 0 ? '' : stderr }).toEqual({ command, code: 0, stderr: '' })
    return { stdout, stderr }
  }
  for (const block of blocks.filter((b) => b.language === 'sh'))
    for (const command of block.code.split('\n').filter((line) => line.trim() && !line.startsWith('npm install'))) await shell(command)
  const main = outputs.at(-1)!
  expect(main.command).toBe('bun main.ts')
  expect(main.stdout.trim().split('\n')).toEqual([
    'created 251, 252 and 253',
    '251 Big 9223372036854775807 available',
    '252 Small -9223372036854775808 pending',
    '253 Odd 9007199254740993 available',
    '253 pets in all',
  ])
  expect(main.stderr).toMatch(/^petstore: 429, waiting \d+ s as Retry-After says\n$/)

  if (twice) {
    // Thirty a minute (a token every 2 s), spent to the last token, then main.ts twice in a row, as a
    // developer reruns it. The server bans at the second 429 within a minute sent before the time the last
    // one named (--ban-after 1); a client that waits never is, and each wait is at most a token's 2 s.
    const paced = onStorage(['keys', 'create', '--plan', 'enterprise', '--rpm', '30', '--rpd', '1000'])
    await eventually(
      async () => (await fetch(`${server.base}/pets?limit=1`, { headers: { authorization: `Bearer ${paced}` } })).status === 200,
    )
    while ((await fetch(`${server.base}/pets?limit=1`, { headers: { authorization: `Bearer ${paced}` } })).status !== 429);
    const waits: string[] = []
    for (const first of [254, 257]) {
      const run = await shell('bun main.ts', paced)
      expect(run.stdout.trim().split('\n')).toEqual([
        `created ${first}, ${first + 1} and ${first + 2}`,
        `${first} Big 9223372036854775807 available`,
        `${first + 1} Small -9223372036854775808 pending`,
        `${first + 2} Odd 9007199254740993 available`,
        `${first + 2} pets in all`,
      ])
      const lines = run.stderr.split('\n').filter(Boolean)
      waits.push(...lines)
      // The first run's first 429 may come while the wait this test's own 429 named still runs: it is
      // told the token after that one, up to 4 s. Every other wait is at most a token's 2 s.
      if (first === 254 && lines.length > 0) expect(lines.shift()).toMatch(/^petstore: 429, waiting [1-4] s as Retry-After says$/)
      for (const line of lines) expect(line).toMatch(/^petstore: 429, waiting [12] s as Retry-After says$/)
    }
    // How many 429s a run meets depends on the client's speed (a slow one finds tokens refilled): at least
    // one over both runs, which with this test's own is the second, where a server counting every 429
    // toward --ban-after 1 would have banned and said 600 s. On a quiet host they meet several.
    expect(waits.length).toBeGreaterThanOrEqual(1)
  }

  // Stored exactly, as the server itself answers them.
  let text = ''
  for (let url: string | undefined = `${server.base}/pets?limit=100`; url; ) {
    const page: Response = await fetch(url, { headers: reader })
    text += await page.text()
    const next: string | undefined = /<([^>]+)>;\s*rel="next"/.exec(page.headers.get('link') ?? '')?.[1]
    url = next && `${server.base}/pets${new URL(next).search}`
  }
  for (const digits of ['9223372036854775807', '-9223372036854775808', '9007199254740993'])
    expect(text).toContain(`"categoryId":${digits},`)

  // And the code the page shows type-checks against the generated types, strictly, with the page's own
  // tsc line (exit 0 above; tsc writes what it finds on stdout).
  const checked = outputs.find((output) => output.command.startsWith('npx --yes tsc --strict'))
  expect(checked?.stdout).toBe('')
}

const TITLE = 'its recipe, run as written, generates a typed client that pages, waits out a 429 and keeps int64 exact'

describe('docs/clients.md on the data file', () => {
  test(TITLE, async () => {
    const server = await startServer({ args: ['--no-access-log', '--ban-after', '1'] })
    try {
      await recipeAsWritten(server, (args) => storageCommand([...args, '--data', server.dataFile]), { twice: true })
    } finally {
      await server.stop()
    }
  }, 180_000)
})

describeWithEngines(['postgresql'], 'docs/clients.md on PostgreSQL', () => {
  const cluster = postgresForSuite()

  test(TITLE, async () => {
    const databaseUrl = await cluster.createDatabase('clients_doc')
    const server = await startServer({ databaseUrl, args: ['--no-access-log'] })
    try {
      await recipeAsWritten(server, (args) => storageCommand([...args, '--database-url', databaseUrl]))
    } finally {
      await server.stop()
    }
  }, 180_000)
})
