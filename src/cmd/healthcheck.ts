/** `petstore healthcheck`: asks the local server's /healthz, for container health checks. */
import { CONFIG_FLAGS, envOf, hostInUrl } from '../config'
import { integer, reader, flagLines } from '../flags/table'
import { asUsageError, help, parse, UsageError } from './options'

/** The server asked: serve's address and port, though port 0 (a free one) is no port to ask. */
const FLAGS = {
  host: {
    ...CONFIG_FLAGS.host,
    help: "the server's address: 0.0.0.0 and :: are asked on 127.0.0.1 and ::1",
  },
  port: {
    ...CONFIG_FLAGS.port,
    help: "the server's port",
    parse: integer({ min: 1, max: 65_535 }),
  },
}

export const USAGE = `Usage: petstore healthcheck [--env production|staging] [--host HOST] [--port N]

Exits 0 when http://HOST:PORT/healthz answers 200 within 2 s, else 1, and says which in one line.
${flagLines(FLAGS)}`

export async function healthcheck(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, FLAGS, USAGE)
  if (values.help) return help(USAGE)
  if (positionals.length) throw new UsageError(`unexpected argument "${positionals[0]}"`, USAGE)
  const env = asUsageError(() => envOf(values, process.env), USAGE)
  const read = reader(FLAGS, values, process.env)
  const port = asUsageError(() => read.value('port', env)!, USAGE)
  // A server bound to every address is asked on loopback of the same family.
  const bound = read.value('host')!
  const host = bound === '0.0.0.0' ? '127.0.0.1' : bound === '::' ? '::1' : bound
  const url = `http://${hostInUrl(host)}:${port}/healthz`
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2000) })
    if (response.status === 200) {
      console.log(`petstore: healthy (${url} answered 200)`)
      return 0
    }
    console.log(`petstore: unhealthy (${url} answered ${response.status})`)
  } catch (error) {
    // Bun's own text for a refused connection asks the reader about their computer: say what happened.
    const reason =
      (error as Error).name === 'TimeoutError'
        ? 'no answer within 2 s'
        : (error as { code?: string }).code === 'ECONNREFUSED'
          ? 'connection refused: nothing listens there'
          : (error as Error).message
    console.log(`petstore: unhealthy (${url}: ${reason})`)
  }
  return 1
}
