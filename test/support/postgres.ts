/**
 * A throwaway PostgreSQL cluster for tests: `initdb` into a temp folder (trust auth, no fsync of the
 * initial files), a server on a free loopback port with its socket in that folder, stopped and removed
 * after. Uses Debian's `postgresql` package; as root it runs the server as the `postgres` user, since
 * PostgreSQL refuses to run as root.
 */
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { freePort } from './ports'
import { forSuite } from './suite'

/**
 * Deadlines for suites that check what storage does, not how soon (the deadlines have suites of their
 * own, on real processes): on a loaded host the serving ones (a 2 s transaction, a 1 s lock wait) were
 * missed now and then, and a test got the documented 503 where it checked a result.
 */
export const PATIENT = { queryMs: 5_000, transactionMs: 10_000 }

export interface PostgresCluster {
  /** postgres://postgres@127.0.0.1:PORT/DATABASE, for the database this cluster was asked for. */
  url: string
  port: number
  /**
   * A fresh, empty database on this cluster, and its URL; in another encoding than UTF8 when asked
   * (as `createdb -E ENCODING -T template0 --locale=C`).
   */
  createDatabase(name: string, encoding?: string): Promise<string>
  /** Stops the server (fast shutdown), keeping its files. */
  stop(): Promise<void>
  /** Starts it again on the same port. */
  start(): Promise<void>
  /** Stops it and removes its files. */
  destroy(): Promise<void>
}

const running = new Set<PostgresCluster>()

/** The folder of PostgreSQL's server programs, or null when the package is not installed. */
export function postgresBinaries(): string | null {
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return null
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'pg_ctl')))
    .sort((a, b) => Number(b) - Number(a))
  return versions.length ? join(root, versions[0]!, 'bin') : null
}

function run(args: string[]): Promise<{ code: number; output: string }> {
  const asPostgres = userInfo().uid === 0 ? ['runuser', '-u', 'postgres', '--'] : []
  const proc = Bun.spawn([...asPostgres, ...args], { stdout: 'pipe', stderr: 'pipe', stdin: 'ignore' })
  return Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]).then(([out, err, code]) => ({
    code,
    output: out + err,
  }))
}

/**
 * A throwaway cluster never outlives the machine: it need not survive a crash of the operating system,
 * which is all fsync and full-page writes guard against (a server killed or stopped loses nothing
 * without them). Without them CREATE DATABASE and each commit cost a fraction, and every in-process
 * app on PostgreSQL starts in a new database; what the server asks of a commit (synchronous_commit,
 * pinned per connection) is unchanged.
 */
const THROWAWAY = '-c fsync=off -c full_page_writes=off'

/**
 * A cluster's files, made by initdb once for a whole `bun run test`: run-suites.ts makes it and names it
 * to its jobs in this variable, and each cluster they start is a copy of it (a copy of 40 MB costs a
 * fraction of what initdb does, about a second of CPU, and a run starts some fifty clusters). Without it
 * (`bun test` alone) each cluster is made by initdb.
 */
export const TEMPLATE_VARIABLE = 'PETSTORE_TEST_POSTGRES_TEMPLATE'

/** A new folder of PostgreSQL's in `parent`, owned by the user the server runs as, readable by it alone. */
function ownFolder(parent: string, prefix: string): string {
  const dir = mkdtempSync(join(parent, prefix))
  if (userInfo().uid === 0) {
    const { uid, gid } = postgresIds()
    chownSync(dir, uid, gid)
  }
  chmodSync(dir, 0o700)
  return dir
}

async function initdb(bin: string, data: string): Promise<void> {
  const init = await run([join(bin, 'initdb'), '-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8'])
  if (init.code !== 0) throw new Error(`initdb failed: ${init.output}`)
}

/** Makes, in `parent`, the cluster files the clusters of a run copy (TEMPLATE_VARIABLE); returns their folder. */
export async function makeTemplate(parent: string): Promise<string> {
  const bin = postgresBinaries()
  if (!bin) throw new Error('PostgreSQL is not installed (apt-get install -y postgresql)')
  const data = join(ownFolder(parent, 'petstore-pg-template-'), 'data')
  await initdb(bin, data)
  return data
}

export async function startPostgres(): Promise<PostgresCluster> {
  const bin = postgresBinaries()
  if (!bin) throw new Error('PostgreSQL is not installed (apt-get install -y postgresql)')
  const dir = ownFolder(tmpdir(), 'petstore-pg-')
  const data = join(dir, 'data')
  const template = process.env[TEMPLATE_VARIABLE]
  if (template) {
    // As the user the files belong to, keeping their owner and modes.
    const copied = await run(['cp', '-a', template, data])
    if (copied.code !== 0) throw new Error(`copying the cluster template failed: ${copied.output}`)
  } else await initdb(bin, data)
  const port = await freePort()
  const start = async () => {
    const result = await run([
      join(bin, 'pg_ctl'),
      '-D',
      data,
      '-w',
      '-l',
      join(dir, 'log'),
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=200 ${THROWAWAY}`,
      'start',
    ])
    if (result.code !== 0) throw new Error(`pg_ctl start failed: ${result.output}`)
  }
  const stop = async () => {
    await run([join(bin, 'pg_ctl'), '-D', data, '-w', '-m', 'fast', 'stop'])
  }
  await start()
  const base = `postgres://postgres@127.0.0.1:${port}`
  const cluster: PostgresCluster = {
    url: `${base}/postgres`,
    port,
    async createDatabase(name, encoding) {
      const admin = new Bun.SQL(`${base}/postgres`, { max: 1 })
      const other = encoding ? ` ENCODING '${encoding.replace(/\W/g, '')}' TEMPLATE template0 LOCALE 'C'` : ''
      // FILE_COPY copies the template's files where the default (WAL_LOG) writes each block to the WAL:
      // a third of the CPU for these small databases (10 made: 0.57 CPU-s against 1.87), and every
      // in-process app on PostgreSQL makes one.
      try {
        await admin.unsafe(`CREATE DATABASE "${name.replace(/"/g, '')}"${other} STRATEGY = FILE_COPY`)
      } finally {
        await admin.close()
      }
      return `${base}/${name}`
    },
    stop,
    start,
    async destroy() {
      running.delete(cluster)
      await stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
  running.add(cluster)
  return cluster
}

/** The PostgreSQL of the suite (describe) it is called in (suite.ts). */
export function postgresForSuite(): PostgresCluster {
  return forSuite('PostgreSQL', startPostgres)
}

function postgresIds(): { uid: number; gid: number } {
  const passwd = readFileSync('/etc/passwd', 'utf8')
  const line = passwd.split('\n').find((l) => l.startsWith('postgres:'))
  if (!line) throw new Error('no postgres user: is the postgresql package installed?')
  const [, , uid, gid] = line.split(':')
  return { uid: Number(uid), gid: Number(gid) }
}

/** Stops every cluster a test left running; the preload runs it after the suite. */
export async function cleanupPostgres(): Promise<void> {
  await Promise.all([...running].map((cluster) => cluster.destroy()))
}
