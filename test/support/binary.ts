/**
 * Runs the compiled binary as a user would: `serve` on a free port with its own data file, and the
 * CLI commands. Every server started here is stopped when the test file ends, even on failure.
 */
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'

export const BINARY = join(import.meta.dir, '..', '..', 'dist', 'petstore')

const running = new Set<Subprocess>()
const tempDirs: string[] = []

/** Kills every server still running and removes every temp dir; the preload runs it after the suite. */
export function cleanupBinaries(): void {
  for (const proc of running) proc.kill('SIGKILL')
  running.clear()
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true })
}
process.on('exit', cleanupBinaries)

export function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-test-'))
  tempDirs.push(dir)
  return dir
}

/** A clean environment: no PETSTORE_* variable of the developer's leaks into a test. */
export function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) if (!name.startsWith('PETSTORE_') && value !== undefined) env[name] = value
  return { ...env, ...extra }
}

export interface CliResult {
  code: number
  stdout: string
  stderr: string
}

export function cli(args: string[], options: { cwd?: string; env?: Record<string, string> } = {}): CliResult {
  const result = Bun.spawnSync([BINARY, ...args], {
    cwd: options.cwd,
    env: cleanEnv(options.env),
    stdout: 'pipe',
    stderr: 'pipe',
  })
  return { code: result.exitCode ?? -1, stdout: result.stdout.toString(), stderr: result.stderr.toString() }
}

/** The id of the key named `name` in the data file, as `keys list` gives it. */
export function keyId(dataFile: string, name: string): string {
  const keys = JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout) as { id: string; name: string }[]
  return keys.find((key) => key.name === name)!.id
}

/** Creates a key with the CLI and returns its secret (the last line of stdout). */
export function createKeyWithCli(dataFile: string, args: string[]): string {
  const result = cli(['keys', 'create', '--data', dataFile, ...args])
  if (result.code !== 0) throw new Error(`keys create failed: ${result.stderr}`)
  return result.stdout.trim().split('\n').at(-1)!
}

export interface Server {
  proc: Subprocess<'ignore', 'pipe' | number, 'pipe'>
  port: number
  /** http://127.0.0.1:PORT */
  origin: string
  /** The API base, origin + /v1. */
  base: string
  dataFile: string
  /** The bootstrap key printed on first start, if this start printed one. */
  bootstrapKey: string | undefined
  stderr: () => string
  stdout: () => string
  /**
   * The exit code, once the process has ended and what it wrote is read: `proc.exited` can come before
   * its last lines reach stderr() (another pipe, read in its own turn).
   */
  exited: Promise<number>
  /**
   * Waits (up to 5 s) until stderr holds `text`, and fails naming it otherwise: a line the server prints
   * as it answers a request may reach this process after the answer does.
   */
  said: (text: string) => Promise<void>
  /** Sends a signal and resolves with the exit code, once the output is read (`exited`). */
  stop: (signal?: 'SIGTERM' | 'SIGINT' | 'SIGKILL') => Promise<number>
}

export interface StartOptions {
  dataFile?: string
  /** Serve from this PostgreSQL database instead of a data file (and a temp folder as the cwd). */
  databaseUrl?: string
  args?: string[]
  env?: Record<string, string>
  cwd?: string
  /** Write the server's stdout (the access log) to this file instead of keeping it in memory. */
  stdoutFile?: string
  /**
   * Serve the operators' console as `serve` does by default (on a free port beside `--port 0`). Without
   * it, the server has none unless `args` give `--console-address`: a store's first start with the
   * console hashes its first operator's password (argon2id, about 0.1 s of CPU), which the suites of
   * the API alone need not pay some two hundred times a run.
   */
  console?: boolean
}

/** Appends what `stream` carries to `sink.text` as it comes, calling `onText` after each piece. */
export async function collect(stream: ReadableStream<Uint8Array>, sink: { text: string }, onText: () => void = () => {}) {
  const decoder = new TextDecoder()
  for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) {
    sink.text += decoder.decode(chunk, { stream: true })
    onText()
  }
}

/** A `serve` that listens, without what its arguments alone know (its data file). */
export type Listening = Omit<Server, 'dataFile'>

/** The line a `serve` prints once it listens, whole (so the port is all there), and its port. */
const LISTENING = /listening on http:\/\/(?:\[[^\]]+\]|[^:/]+):(\d+).*\n/

/**
 * Runs `command` (a `serve`, as given) with a clean environment, collecting its output, and resolves
 * once it says it listens; one that exits first, or does not listen within 15 s, is killed and fails.
 */
export async function spawnListening(
  command: string[],
  options: { cwd?: string; env?: Record<string, string>; stdoutFile?: string } = {},
): Promise<Listening> {
  const stdout = options.stdoutFile ? openSync(options.stdoutFile, 'w') : 'pipe'
  const proc = Bun.spawn(command, { cwd: options.cwd, env: cleanEnv(options.env), stdin: 'ignore', stdout, stderr: 'pipe' })
  if (typeof stdout === 'number') closeSync(stdout)
  running.add(proc)
  const out = { text: '' }
  const err = { text: '' }
  let wake = () => {}
  const collected = Promise.all([
    proc.stdout instanceof ReadableStream ? collect(proc.stdout, out, () => wake()) : null,
    collect(proc.stderr, err, () => wake()),
  ])
  // Bounded: a pipe some other process still holds open would keep it from ending.
  const exited = proc.exited.then(async (code) => {
    await Promise.race([collected, Bun.sleep(2_000)])
    return code
  })
  const deadline = Date.now() + 15_000
  while (!LISTENING.test(err.text)) {
    if (proc.exitCode !== null || Date.now() > deadline) {
      proc.kill('SIGKILL')
      running.delete(proc)
      throw new Error(`server did not start (exit ${proc.exitCode}):\n${err.text}`)
    }
    await Promise.race([new Promise<void>((resolve) => (wake = resolve)), proc.exited, Bun.sleep(100)])
  }
  const port = Number(LISTENING.exec(err.text)![1])
  const origin = `http://127.0.0.1:${port}`
  return {
    proc,
    port,
    origin,
    base: `${origin}/v1`,
    bootstrapKey: bootstrapSecret(err.text),
    stderr: () => err.text,
    stdout: () => out.text,
    exited,
    said: async (text) => {
      try {
        await eventually(() => err.text.includes(text))
      } catch {
        throw new Error(`the server did not say "${text}" within 5 s; its stderr:\n${err.text}`)
      }
    },
    stop: async (signal = 'SIGTERM') => {
      proc.kill(signal)
      const code = await exited
      running.delete(proc)
      return code
    },
  }
}

export async function startServer(options: StartOptions = {}): Promise<Server> {
  const dataFile = options.dataFile ?? join(tempDir(), 'petstore.db')
  const storage = options.databaseUrl ? ['--database-url', options.databaseUrl] : ['--data', dataFile]
  const given = options.args ?? []
  // A flag given twice is refused: the test's own --port or --host replaces the default.
  const unless = (flag: string, value: string) => (given.includes(flag) ? [] : [flag, value])
  const consoleOff = options.console ? [] : unless('--console-address', 'off')
  const args = ['serve', ...unless('--port', '0'), ...unless('--host', '127.0.0.1'), ...consoleOff, ...storage, ...given]
  const cwd = options.cwd ?? (options.databaseUrl ? tempDir() : undefined)
  return { ...(await spawnListening([BINARY, ...args], { ...options, cwd })), dataFile }
}

/** The bootstrap key a start announced, read from the file its stderr names; undefined when none. */
export function bootstrapSecret(stderr: string): string | undefined {
  const file = /its secret is in (\S+) \(readable by this user only\)/.exec(stderr)?.[1]
  return file === undefined ? undefined : readFileSync(file, 'utf8').trim()
}

/**
 * Polls `read` (as eventually does) until what it reads has not changed for `stillMs`: for counters other
 * processes move (statistics, command counts). The last reading, and whether it stood still within
 * `timeoutMs`; `onChange` hears each change.
 */
export async function untilStill<T>(
  read: () => Promise<T>,
  stillMs: number,
  timeoutMs: number,
  options: { same?: (a: T, b: T) => boolean; onChange?: (from: T, to: T) => void } = {},
): Promise<{ last: T; still: boolean }> {
  const same = options.same ?? ((a: T, b: T) => a === b)
  const started = performance.now()
  let last = await read()
  let since = started
  for (;;) {
    if (performance.now() - since >= stillMs) return { last, still: true }
    if (performance.now() - started >= timeoutMs) return { last, still: false }
    await Bun.sleep(20)
    const now = await read()
    if (!same(last, now)) {
      options.onChange?.(last, now)
      last = now
      since = performance.now()
    }
  }
}

/** Polls until `check` returns true; fails after `timeoutMs`. For conditions, not for fixed delays. */
export async function eventually(check: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await Bun.sleep(20)
  }
}
