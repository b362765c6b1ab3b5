/**
 * Helpers for the black-box process tests: a `serve` runner without the harness's fixed flags (for
 * testing defaults and environment variables), an async CLI runner (so the test process keeps serving
 * its own sockets while a command runs), free ports, and small HTTP helpers.
 */
import { afterAll } from 'bun:test'
import type { Subprocess } from 'bun'
import { readFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { BINARY, type CliResult, cleanEnv, collect, type Listening, type Server, spawnListening, startServer } from '../support/binary'

const running = new Set<Subprocess>()

/** Kills whatever spawnServe/serveExpectingFailure left running; each test file calls it in afterAll. */
export function killSpawned(): void {
  for (const proc of running) proc.kill('SIGKILL')
  running.clear()
}
afterAll(killSpawned)

/** `proc`, killed with the rest of what this file spawned when the file ends. */
export function killedAtEnd<T extends Subprocess>(proc: T): T {
  running.add(proc)
  return proc
}

export const auth = (key: string, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${key}`, ...extra })

export function postPet(base: string, key: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${base}/pets`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth(key), ...headers },
    body: JSON.stringify(body),
  })
}

export interface PetBody {
  id: number
  name: string
  categoryId: number
  status: string
}

/** Every pet, following the `Link: rel="next"` pages. `rewrite` maps a link's base to a reachable one. */
export async function listAll(base: string, key: string, rewrite: (url: string) => string = (u) => u): Promise<PetBody[]> {
  const pets: PetBody[] = []
  let url: string | null = `${base}/pets?limit=100`
  while (url) {
    const response: Response = await fetch(url, { headers: auth(key) })
    if (response.status !== 200) throw new Error(`GET ${url} answered ${response.status}: ${await response.text()}`)
    pets.push(...((await response.json()) as PetBody[]))
    const link = response.headers.get('link')
    const next = link ? /<([^>]+)>;\s*rel="next"/.exec(link) : null
    url = next ? rewrite(next[1]!) : null
  }
  return pets
}

/** A port nothing listens on: bound, read and released. */
export { freePort as unusedPort, freePorts as unusedPorts } from '../support/ports'

/** Runs a CLI command without blocking this process's event loop. */
export async function cliAsync(args: string[], options: { cwd?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
  const proc = Bun.spawn([BINARY, ...args], {
    cwd: options.cwd,
    env: cleanEnv(options.env),
    stdin: 'ignore',
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { code, stdout, stderr }
}

const LISTENING = /(\w+) listening on http:\/\/(?:\[[^\]]+\]|[^:]+):(\d+), API at (\S+), data (.+?), scenarios (?:on|off)/

export interface RawServer extends Listening {
  /** What the server says it runs as. */
  env: string
  apiBase: string
  dataFile: string
}

/**
 * `petstore serve ARGS` exactly as given (no --port/--data added), waiting for the "listening" line.
 * Pass `--port 0` yourself unless the test is about the port. `command` replaces `petstore serve` (the
 * sources' `bun run start`).
 */
export async function spawnServe(
  args: string[],
  options: { cwd?: string; env?: Record<string, string>; command?: string[] } = {},
): Promise<RawServer> {
  const server = await spawnListening([...(options.command ?? [BINARY, 'serve']), ...args], options)
  running.add(server.proc)
  const [, env, , apiBase, dataFile] = LISTENING.exec(server.stderr())!
  return { ...server, env: env!, apiBase: apiBase!, dataFile: dataFile!.trim() }
}

/** Runs `serve` expecting it to fail: resolves with its exit code and output, killing it if it listens. */
export async function serveExpectingFailure(
  args: string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
): Promise<CliResult & { listened: boolean }> {
  const proc = Bun.spawn([BINARY, 'serve', ...args], {
    cwd: options.cwd,
    env: cleanEnv(options.env),
    stdin: 'ignore',
    stdout: 'pipe',
    stderr: 'pipe',
  })
  running.add(proc)
  const out = { text: '' }
  const err = { text: '' }
  let wake = () => {}
  const done = Promise.all([collect(proc.stdout, out, () => wake()), collect(proc.stderr, err, () => wake())])
  let listened = false
  const deadline = Date.now() + 15_000
  while (proc.exitCode === null && Date.now() < deadline) {
    if (/listening on/.test(err.text)) {
      listened = true
      proc.kill('SIGKILL')
      break
    }
    await Promise.race([new Promise<void>((resolve) => (wake = resolve)), proc.exited, Bun.sleep(100)])
  }
  if (proc.exitCode === null && !listened) proc.kill('SIGKILL')
  const code = await proc.exited
  await done
  running.delete(proc)
  return { code, stdout: out.text, stderr: err.text, listened }
}

/** The reason a command gave for failing: its last line, which a usage error prints under the usage. */
export function reasonLine(stderr: string): string {
  return stderr.trimEnd().split('\n').at(-1)!
}

/** A stack trace or a runtime dump in output meant for people. */
export function looksLikeStackTrace(text: string): boolean {
  return /^\s+at\s/m.test(text) || /\$bunfs|Bun v\d|error: .*\n\s+at|\d+ \| /.test(text)
}

export interface RawResponse {
  status: number
  headers: Record<string, string>
  body: string
}

/** Parses the final HTTP/1.1 response in `text` (after any 1xx), once it is complete; else null. */
export function parseRawResponse(text: string): RawResponse | null {
  let rest = text
  while (/^HTTP\/1\.1 1\d\d /.test(rest)) {
    const end = rest.indexOf('\r\n\r\n')
    if (end < 0) return null
    rest = rest.slice(end + 4)
  }
  const end = rest.indexOf('\r\n\r\n')
  if (end < 0) return null
  const [statusLine, ...lines] = rest.slice(0, end).split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(':')
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  const body = rest.slice(end + 4)
  const length = Number(headers['content-length'] ?? NaN)
  if (Number.isNaN(length) || Buffer.byteLength(body) < length) return null
  return { status: Number(statusLine!.split(' ')[1]), headers, body }
}

export interface SlowPost {
  /** Sends the rest of the body. */
  finish(): void
  /** Everything the server sent on this connection. */
  received(): string
  /** Resolves with the final response, or rejects when the connection ends without one. */
  response: Promise<RawResponse>
  close(): void
}

/**
 * Starts `POST /pets` over a raw connection with `Expect: 100-continue` and resolves once the server
 * has answered `100 Continue`: from then on the request is certainly in the server's hands, in flight,
 * waiting for the rest of its body.
 */
export async function startSlowPost(port: number, basePath: string, key: string, pet: unknown): Promise<SlowPost> {
  const body = JSON.stringify(pet)
  const socket = connect(port, '127.0.0.1')
  let text = ''
  let onData = () => {}
  let ended = false
  socket.on('data', (chunk) => {
    text += chunk.toString()
    onData()
  })
  socket.on('close', () => {
    ended = true
    onData()
  })
  socket.on('error', () => {})
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve)
    socket.once('error', reject)
  })
  socket.write(
    `POST ${basePath}/pets HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${key}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nExpect: 100-continue\r\n\r\n` +
      body.slice(0, 3),
  )
  const until = async (check: () => boolean) => {
    while (!check()) {
      if (ended) return
      await new Promise<void>((resolve) => (onData = resolve))
    }
  }
  await until(() => /^HTTP\/1\.1 100 /.test(text))
  if (!/^HTTP\/1\.1 100 /.test(text)) throw new Error(`no 100 Continue: ${JSON.stringify(text)}`)
  const response = (async () => {
    await until(() => parseRawResponse(text) !== null)
    const parsed = parseRawResponse(text)
    if (!parsed) throw new Error(`connection ended without a complete response: ${JSON.stringify(text)}`)
    return parsed
  })()
  response.catch(() => {})
  return {
    finish: () => void socket.write(body.slice(3)),
    received: () => text,
    response,
    close: () => void socket.destroy(),
  }
}

/** Resolves true when a TCP connection to the port is refused. */
export async function connectionRefused(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(false)
    })
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code === 'ECONNREFUSED'))
  })
}

export interface ConsoleServer extends Server {
  consolePort: number
  /** http://127.0.0.1:CONSOLE_PORT */
  console: string
  /** The first operator's password, from the file the first start wrote ('' when none was made). */
  password: string
}

/** The binary with its console on a free port, read from the startup line. */
export async function startWithConsole(options: Parameters<typeof startServer>[0] = {}): Promise<ConsoleServer> {
  const server = await startServer({ ...options, console: true })
  const port = Number(/, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(server.stderr())?.[1])
  if (!port) throw new Error(`no console in the startup line:\n${server.stderr()}`)
  const file = /its password is in (\S+) \(readable by this user only\)/.exec(server.stderr())?.[1]
  return { ...server, consolePort: port, console: `http://127.0.0.1:${port}`, password: file ? readFileSync(file, 'utf8').trim() : '' }
}

/** What became of one request of keptAliveClients: its status, or how its connection failed. */
export type KeptAliveOutcome =
  | number
  /** Sent on a connection that had carried an answer already, and closed unanswered. */
  | 'reset on a kept-alive connection'
  /** Sent as the first request of a new connection, and closed unanswered. */
  | 'reset on a new connection'
  /** The connection was refused: nothing listens, nothing was sent. */
  | 'refused'

/**
 * `clients` clients sending `GET /v1/pets?limit=1` one after the other on one kept-alive connection
 * each, the next as soon as an answer is read, as a proxy's connection pool does; a new connection
 * only after `Connection: close` or a connection closed. Each ends at its first refused connection.
 */
export function keptAliveClients(port: number, key: string, clients: number) {
  const outcomes: KeptAliveOutcome[] = []
  interface Connection {
    socket: Socket
    text: string
    closed: boolean
    answered: number
    wake: () => void
  }
  const open = () =>
    new Promise<Connection | 'refused'>((resolve) => {
      const connection: Connection = {
        socket: connect(port, '127.0.0.1', () => resolve(connection)),
        text: '',
        closed: false,
        answered: 0,
        wake: () => {},
      }
      connection.socket.on('data', (chunk) => {
        connection.text += chunk.toString()
        connection.wake()
      })
      // Refused: nothing listens. Any other failure, before or after connecting (a connection reset while
      // the kernel still held it for the closing listener), closes it: the client counts a reset and tries
      // again, where waiting for a connect that never comes hung it.
      connection.socket.on('error', (error: NodeJS.ErrnoException) => {
        if (error.code === 'ECONNREFUSED') return resolve('refused')
        connection.closed = true
        resolve(connection)
      })
      connection.socket.on('close', () => {
        connection.closed = true
        connection.wake()
      })
    })
  const client = async () => {
    let connection: Connection | undefined
    for (;;) {
      if (!connection || connection.closed) {
        const opened = await open()
        if (opened === 'refused') return void outcomes.push('refused')
        connection = opened
      }
      const current = connection
      current.text = ''
      current.socket.write(`GET /v1/pets?limit=1 HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${key}\r\n\r\n`)
      while (!parseRawResponse(current.text) && !current.closed) await new Promise<void>((resolve) => (current.wake = resolve))
      const response = parseRawResponse(current.text)
      if (!response) {
        outcomes.push(current.answered ? 'reset on a kept-alive connection' : 'reset on a new connection')
        continue
      }
      outcomes.push(response.status)
      current.answered++
      if (response.headers.connection === 'close') {
        current.socket.destroy()
        connection = undefined
      }
    }
  }
  const done = Promise.all(Array.from({ length: clients }, client))
  return {
    outcomes,
    /** Resolves once every client has met a refused connection. */
    done,
    /** How many of each outcome. */
    tally: () => Object.fromEntries([...new Set(outcomes)].map((outcome) => [outcome, outcomes.filter((o) => o === outcome).length])),
  }
}
