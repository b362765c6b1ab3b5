/**
 * Signals over the compiled binary, under load: each signal a process manager, a terminal or a stray
 * `kill` commonly sends either stops the server as SIGTERM does (the request in flight answered, every
 * answered request in `keys usage` after a restart, the day quota spent before the signal still
 * spent, and no request sent on a kept-alive connection reset), or leaves it serving; SIGHUP,
 * logrotate's, leaves it serving and is said each time. And the shipped systemd units never send a
 * signal that stops it for a reload. See docs/operations.md#signals.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { copyFileSync, existsSync, readdirSync, readFileSync, truncateSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { BINARY, cleanEnv, cli, createKeyWithCli, eventually, type Server, spawnListening, startServer, tempDir } from '../support/binary'
import { auth, cliAsync, keptAliveClients, killedAtEnd, killSpawned, startSlowPost } from './helpers'
import { withDeadline } from '../../src/domain/time'

afterAll(killSpawned)
setDefaultTimeout(60_000)

const DAY_LIMIT = 1_000
const args = ['--no-access-log', '--console-address', 'off']

/** 30 clients, each a new connection per request, until told to stop or refused: the answers they got. */
function load(server: Server, key: string) {
  const statuses: number[] = []
  let running = true
  const clients = Array.from({ length: 30 }, async () => {
    while (running) {
      try {
        const response = await fetch(`${server.base}/pets?limit=1`, { headers: auth(key, { connection: 'close' }), keepalive: false })
        await response.text()
        statuses.push(response.status)
      } catch {
        // Refused once the listener closed (or reset before an answer): this client is done.
        return
      }
    }
  })
  return {
    statuses,
    async stop() {
      running = false
      await Promise.all(clients)
    },
  }
}

/** Whether the process has ended, by exiting or by a signal. */
const ended = (server: Server) => server.proc.exitCode !== null || server.proc.signalCode !== null

/** Requests counted for the key in the last hour, as `keys usage --json` reads them from the data file. */
async function requestsOf(dataFile: string, keyId: string): Promise<number> {
  const result = await cliAsync(['keys', 'usage', keyId, '--since', '1h', '--json', '--data', dataFile])
  if (result.code !== 0) throw new Error(result.stderr)
  return (JSON.parse(result.stdout) as { window: { requests: number } }).window.requests
}

/** A server with a key of `rpd` a day that has answered 300 requests. */
async function primed(name: string, rpd = DAY_LIMIT) {
  const dataFile = join(tempDir(), 'petstore.db')
  const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '100000', '--rpd', String(rpd), '--name', name])
  const keyId = (JSON.parse(cli(['keys', 'list', '--json', '--data', dataFile]).stdout) as { id: string }[])[0]!.id
  const server = await startServer({ dataFile, args })
  // 300 answered requests, 30 at a time, right before the signal: within the 2 s between usage writes
  // and the 5 s between saves of the day buckets, so only the stop's last save can keep them.
  for (let round = 0; round < 10; round++) {
    const statuses = await Promise.all(
      Array.from({ length: 30 }, () => fetch(`${server.base}/pets`, { headers: auth(key) }).then((r) => r.status)),
    )
    expect(statuses).toEqual(statuses.map(() => 200))
  }
  return { dataFile, key, keyId, server }
}

describe('signals', () => {
  test.each(['SIGQUIT', 'SIGXCPU', 'SIGTERM', 'SIGINT'] as const)(
    '%s under load stops as SIGTERM does: the request in flight answered, usage and day quota kept over a restart',
    async (signal) => {
      const { dataFile, key, keyId, server } = await primed(signal)
      const slow = await startSlowPost(server.port, '/v1', key, { name: 'in flight', categoryId: 1 })
      const traffic = load(server, key)
      await eventually(() => traffic.statuses.length >= 60)
      server.proc.kill(signal)
      await eventually(() => server.stderr().includes(`${signal} received`) || ended(server))
      await traffic.stop()
      slow.finish()
      expect(
        await slow.response.then(
          (answer) => answer.status,
          (error: Error) => error.message,
        ),
      ).toBe(201)
      slow.close()
      expect({ exitCode: await server.exited, signalCode: server.proc.signalCode }).toEqual({ exitCode: 0, signalCode: null })
      expect(server.stderr()).toContain('petstore: stopped')
      // Every answer the clients got was a whole 200 (the others were refused before reaching it).
      expect(traffic.statuses.filter((status) => status !== 200)).toEqual([])

      const answered = 300 + traffic.statuses.length + 1
      expect(await requestsOf(dataFile, keyId)).toBe(answered)
      const again = await startServer({ dataFile, args })
      const response = await fetch(`${again.base}/pets`, { headers: auth(key) })
      expect(response.status).toBe(200)
      // The day bucket is the one in force: what was spent before the signal (and this request) is gone.
      expect(response.headers.get('x-ratelimit-limit')).toBe(String(DAY_LIMIT))
      expect(Number(response.headers.get('x-ratelimit-remaining'))).toBe(DAY_LIMIT - answered - 1)
      expect(await again.stop()).toBe(0)
    },
  )

  test.each(['SIGTERM', 'SIGINT', 'SIGQUIT', 'SIGXCPU'] as const)(
    '%s under 32 kept-alive clients: no request sent on a kept-alive connection is reset, as in a takeover',
    async (signal) => {
      const dataFile = join(tempDir(), 'petstore.db')
      const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '1000000', '--rpd', '1000000'])
      const server = await startServer({ dataFile, args })
      const clients = keptAliveClients(server.port, key, 32)
      await eventually(() => clients.outcomes.length >= 300)
      server.proc.kill(signal)
      // Deadlines well inside the test's, so a hang says where it is (one run on a loaded host hung here).
      expect(
        await withDeadline<number | string>(
          server.exited,
          30_000,
          () => `still running 30 s after ${signal}; its stderr:\n${server.stderr()}`,
        ),
      ).toBe(0)
      const done = clients.done.then(() => 'done')
      expect(
        await withDeadline(done, 15_000, () => `clients still sending 15 s after the server exited: ${JSON.stringify(clients.tally())}`),
      ).toBe('done')
      const tally = clients.tally()
      // Every answer is a 200, and each client ends refused (nothing listens): none of its requests was
      // cut on a connection it was told it could keep. (One sent on a connection opened as the socket
      // closes can still be reset: docs/operations.md#shutdown.)
      expect({ signal, answers: Object.keys(tally).filter((outcome) => /^\d/.test(outcome)), ...tally }).toMatchObject({
        signal,
        answers: ['200'],
        refused: 32,
      })
      expect({ signal, reset: tally['reset on a kept-alive connection'] ?? 0 }).toEqual({ signal, reset: 0 })
    },
  )

  test.each(['SIGUSR1', 'SIGALRM', 'SIGVTALRM', 'SIGPROF', 'SIGIO', 'SIGPIPE', 'SIGWINCH'] as const)(
    '%s under load: the server keeps serving every request and says so at most once',
    async (signal) => {
      // A day's budget far past what the clients send: a fast host answers hundreds more between two looks
      // at the count, and past DAY_LIMIT they would be 429s.
      const { key, server } = await primed(signal, 1_000_000)
      const traffic = load(server, key)
      await eventually(() => traffic.statuses.length >= 60)
      server.proc.kill(signal)
      server.proc.kill(signal)
      const atSignal = traffic.statuses.length
      await eventually(() => traffic.statuses.length >= atSignal + 300 || ended(server), 15_000)
      expect({ exitCode: server.proc.exitCode, signalCode: server.proc.signalCode }).toEqual({ exitCode: null, signalCode: null })
      await traffic.stop()
      expect(traffic.statuses.filter((status) => status !== 200)).toEqual([])
      expect(
        server
          .stderr()
          .split('\n')
          .filter((line) => line.includes(signal)).length,
      ).toBeLessThanOrEqual(1)
      expect(await server.stop()).toBe(0)
    },
  )

  test("SIGHUP, as logrotate's copytruncate and postrotate kill -HUP send it, under load: the server keeps serving every request, says so each time, and the log appended with >> goes on at the start of the emptied file", async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    const key = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '100000', '--rpd', '100000'])
    const log = join(tempDir(), 'access.log')
    // As docs/operations.md says to run it: stdout appended to a file, which logrotate then rotates.
    const listening = await spawnListening([
      'sh',
      '-c',
      'exec "$0" serve --port 0 --host 127.0.0.1 --data "$1" --console-address off >>"$2"',
      BINARY,
      dataFile,
      log,
    ])
    const server: Server = { ...listening, dataFile }
    const traffic = load(server, key)
    await eventually(() => traffic.statuses.length >= 60)
    await eventually(() => readFileSync(log, 'utf8').includes('"status":200'))
    const notices = () =>
      server
        .stderr()
        .split('\n')
        .filter((line) => line.includes('SIGHUP'))
    // copytruncate, then postrotate's kill -HUP, twice (two rotations; the second once the first is
    // heard, as two signals of a kind sent together are delivered as one).
    for (const rotation of [1, 2]) {
      copyFileSync(log, `${log}.${rotation}`)
      truncateSync(log, 0)
      server.proc.kill('SIGHUP')
      await eventually(() => notices().length === rotation || ended(server))
    }
    const atSignal = traffic.statuses.length
    await eventually(() => traffic.statuses.length >= atSignal + 300 || ended(server), 15_000)
    expect({ exitCode: server.proc.exitCode, signalCode: server.proc.signalCode }).toEqual({ exitCode: null, signalCode: null })
    await eventually(() => readFileSync(log, 'utf8').includes('"status":200'))
    await traffic.stop()
    expect(traffic.statuses.filter((status) => status !== 200)).toEqual([])
    expect(notices()).toEqual([1, 2].map(() => expect.stringMatching(/^petstore: SIGHUP received: still serving \(/)))
    expect(await server.stop()).toBe(0)
    // Appended: the lines after the truncation begin the file, with no hole of zeros before them.
    const after = readFileSync(log, 'utf8')
    expect(after.includes('\0')).toBe(false)
    for (const line of after.trimEnd().split('\n')) expect(JSON.parse(line)).toMatchObject({ status: 200 })
  })

  /**
   * `petstore serve` as soon as it catches `signal` (its SigCgt in /proc; the entry installs every handler
   * before loading the server's code, which takes tens of milliseconds), sent that signal at once.
   */
  async function signalledWhileStarting(signal: 'SIGHUP' | 'SIGTERM' | 'SIGUSR2', after: 'caught' | 'first key made' = 'caught') {
    const dataFile = join(tempDir(), 'petstore.db')
    const proc = killedAtEnd(
      // With the console (on a free port) when the signal waits for the first key: the start then goes on
      // to make the console's first operator, hashing its password off the main thread, while the event loop polls.
      Bun.spawn(
        [BINARY, 'serve', '--port', '0', '--data', dataFile, ...(after === 'caught' ? args : ['--console-address', '127.0.0.1:0'])],
        {
          env: cleanEnv(),
          stdin: 'ignore',
          stdout: 'ignore',
          stderr: 'pipe',
        },
      ),
    )
    const bit = 1n << BigInt({ SIGHUP: 1, SIGUSR2: 12, SIGTERM: 15 }[signal] - 1)
    const catches = () => {
      const mask = /^SigCgt:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${proc.pid}/status`, 'utf8'))
      return mask !== null && (BigInt(`0x${mask[1]}`) & bit) !== 0n
    }
    // Or later: once the start has made the first key (its file written), before the listening line.
    const ready = after === 'caught' ? catches : () => existsSync(join(dirname(dataFile), 'petstore-bootstrap-key.txt'))
    while (!ready()) await new Promise((resolve) => setImmediate(resolve))
    proc.kill(signal)
    return proc
  }

  test('a SIGHUP while the server starts, as early as the process can catch one, neither stops it nor its start', async () => {
    const proc = await signalledWhileStarting('SIGHUP')
    const err = { text: '' }
    const reader = proc.stderr.pipeThrough(new TextDecoderStream()).getReader()
    // Bun runs a signal's handler when its event loop next polls, which may be once the server listens.
    while (!(/listening on/.test(err.text) && /SIGHUP received/.test(err.text))) {
      const { value, done } = await reader.read()
      if (done) break
      err.text += value
    }
    expect(err.text).toMatch(/^petstore: SIGHUP received: still serving \(/m)
    const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err.text)![1])
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200)
    proc.kill('SIGTERM')
    expect(await proc.exited).toBe(0)
  })

  test('a SIGUSR2 while the server starts, with no server taking over, is answered once it serves: it serves on', async () => {
    const proc = await signalledWhileStarting('SIGUSR2', 'first key made')
    const err = { text: '' }
    const reader = proc.stderr.pipeThrough(new TextDecoderStream()).getReader()
    while (!/SIGUSR2 received/.test(err.text)) {
      const { value, done } = await reader.read()
      if (done) break
      err.text += value
    }
    expect(err.text).toMatch(/listening on(.|\n)*\npetstore: SIGUSR2 received, but no server is taking over .*: still serving$/m)
    const port = Number(/listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(err.text)![1])
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200)
    proc.kill('SIGTERM')
    expect(await proc.exited).toBe(0)
  })

  test('a SIGTERM while the server starts stops it with exit 0, saying so', async () => {
    const proc = await signalledWhileStarting('SIGTERM')
    expect(await proc.exited).toBe(0)
    expect(proc.signalCode).toBeNull()
    // Before the listening line if the start waited on something, or as any stop once it listens.
    expect(await new Response(proc.stderr).text()).toMatch(
      /^petstore: SIGTERM received( before the server started$|, finishing in-flight requests\npetstore: stopped$)/m,
    )
  })

  test('the shipped systemd units send no stopping signal to reload', () => {
    const folder = join(import.meta.dir, '..', '..', 'deploy', 'systemd')
    for (const unit of readdirSync(folder).filter((name) => name.endsWith('.service'))) {
      const text = readFileSync(join(folder, unit), 'utf8')
      expect({ unit, reload: text.match(/^ExecReload=.*$/m)?.[0] ?? null }).toEqual({ unit, reload: null })
    }
  })
})
