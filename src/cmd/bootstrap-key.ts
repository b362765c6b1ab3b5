/**
 * The first key of a server that has none, and the rule for a store's first secrets (bootstrap-operator.ts
 * too): written to an owner-only file beside the data file, never to the log (stderr under systemd and
 * Docker), which says where it is; an interactive terminal, where nothing is logged, is shown it too.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { basename, dirname, relative, resolve } from 'node:path'
import { type Config, ENVIRONMENTS } from '../config'
import { makeKey } from '../domain/api-key'
import type { MaybePromise, Storage } from '../domain/repositories'
import { opening } from '../storage/shared/open-errors'
import { auditCommand } from './audit'

export async function bootstrapKey(config: Config, storage: Storage, reload: () => unknown): Promise<void> {
  const { secret, record } = makeKey({ plan: 'free', name: 'bootstrap' }, Date.now())
  const file = await firstSecret(config, 'bootstrap-key.txt', secret, "bootstrap key's secret", () => storage.keys.insertIfNone(record))
  await reload()
  if (file === null) return
  console.error(
    `petstore: no API keys yet, so a Free key was created (id ${record.id}); its secret is in ${shownAt(file, secret)}` +
      `\npetstore: make more with: ${commandName()} keys create --plan pro --name NAME${storeFlags(config)}`,
  )
  await auditCommand(storage, 'key.create', record.id, { firstStart: true })
}

/**
 * Writes `secret` to its file (secretFile, owner-only) before `make` stores what it opens, so nothing is
 * ever made whose secret was lost; the file is kept only when `make` says it made it. The file when it
 * did, else null.
 */
export async function firstSecret(
  config: Config,
  suffix: string,
  secret: string,
  what: string,
  make: () => MaybePromise<boolean>,
): Promise<string | null> {
  const file = secretFile(config.dataFile, config.database?.url ?? null, suffix)
  const temporary = `${file}.${process.pid}.tmp`
  // With PostgreSQL there is no data file, so the folder may not exist yet.
  opening(`cannot write the ${what} to ${temporary}`, () => {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 })
    writeFileSync(temporary, `${secret}\n`, { mode: 0o600, flag: 'wx' })
  })
  try {
    if (!(await make())) return null
    renameSync(temporary, file)
    return file
  } finally {
    rmSync(temporary, { force: true })
  }
}

/** Where a first secret is, as the start line says it: and the secret itself on an interactive terminal. */
export function shownAt(file: string, secret: string): string {
  return `${file} (readable by this user only)${process.stderr.isTTY ? `:\n${secret}` : ''}`
}

/** The flags that name the store the server uses, so a command run by following a hint lands there. */
export function storeFlags(config: Config): string {
  return config.database
    ? ' (with the same PETSTORE_DATABASE_URL)'
    : ENVIRONMENTS[config.env].dataFile !== config.dataFile
      ? ` --data ${resolve(config.dataFile)}`
      : config.env === 'staging'
        ? ' --env staging'
        : ''
}

/**
 * Where a store's first secrets go, absolute: beside its data file (`data/petstore.db` and
 * `bootstrap-key.txt` → `data/petstore-bootstrap-key.txt`); for a PostgreSQL database, in the same folder
 * under the database's own name (`data/petstore-postgres-HOST-PORT-DB-bootstrap-key.txt`), so a database
 * tried in the folder of a data file never replaces that file's secrets.
 */
export function secretFile(dataFile: string, databaseUrl: string | null, suffix: string): string {
  const base = basename(dataFile).replace(/\.db$/, '')
  return resolve(dirname(dataFile), databaseUrl === null ? `${base}-${suffix}` : `${base}-postgres-${databaseName(databaseUrl)}-${suffix}`)
}

/**
 * HOST-PORT-DB of a PostgreSQL URL as libpq reads it (a socket folder in `?host=`, `?port=`, the user's
 * name for a missing database), as a file name takes it: a name that had to change (`_` for what a file
 * name cannot hold) gets a hash of the original, so two databases never share a file.
 */
function databaseName(url: string): string {
  const parsed = URL.parse(url)
  const query = parsed?.searchParams
  const parts = [
    parsed?.hostname || query?.get('host') || 'localhost',
    parsed?.port || query?.get('port') || '5432',
    parsed?.pathname.slice(1) || parsed?.username || 'postgres',
  ]
  const name = parts.join('-')
  const safe = name.replace(/[^A-Za-z0-9._-]/g, '_')
  return safe === name ? name : `${safe}-${new Bun.CryptoHasher('sha256').update(parts.join('\n')).digest('hex').slice(0, 8)}`
}

/**
 * How the user ran us: the binary as they named it (`petstore` from PATH, `dist/petstore`, the unit's
 * whole path), or the sources through Bun.
 */
export function commandName(): string {
  if (Bun.main.startsWith('/$bunfs/') || Bun.main.startsWith('B:/~BUN/')) return process.argv0
  // `src/index.ts` from the project folder; from anywhere else the whole path, which works from there too.
  const path = relative(process.cwd(), Bun.main)
  return `bun ${path && !path.startsWith('..') ? path : Bun.main}`
}
