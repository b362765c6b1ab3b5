/**
 * The first key of a server that has none. Its secret goes to a file beside the data file, readable by
 * its owner only, and never to the log (under systemd and Docker, stderr is the log); stderr says where
 * it is. On an interactive terminal, where nothing is logged, the secret is shown as well.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { basename, dirname, relative, resolve } from 'node:path'
import { type Config, ENVIRONMENTS } from '../config'
import { makeKey } from '../domain/api-key'
import { StorageOpenError, type Storage } from '../domain/repositories'

export async function bootstrapKey(config: Config, storage: Storage, reload: () => unknown): Promise<void> {
  const { secret, record } = makeKey({ plan: 'free', name: 'bootstrap' }, Date.now())
  const file = bootstrapKeyFile(config.dataFile)
  const temporary = `${file}.${process.pid}.tmp`
  // The secret is on disk before the key exists, so a key is never made whose secret was lost. With
  // PostgreSQL there is no data file, so the folder may not exist yet.
  try {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 })
    writeFileSync(temporary, `${secret}\n`, { mode: 0o600, flag: 'wx' })
  } catch (error) {
    throw new StorageOpenError(`cannot write the bootstrap key's secret to ${temporary}: ${(error as Error).message}`)
  }
  let made: boolean
  try {
    made = await storage.keys.insertIfNone(record)
    if (made) renameSync(temporary, file)
  } finally {
    rmSync(temporary, { force: true })
  }
  await reload()
  if (made) announceBootstrapKey(config, record.id, secret, file)
}

function announceBootstrapKey(config: Config, id: string, secret: string, file: string): void {
  // The hint names the store the server uses, so a key made by following it lands there.
  const where = config.database
    ? ' (with the same PETSTORE_DATABASE_URL)'
    : ENVIRONMENTS[config.env].dataFile !== config.dataFile
      ? ` --data ${resolve(config.dataFile)}`
      : config.env === 'staging'
        ? ' --env staging'
        : ''
  console.error(
    `petstore: no API keys yet, so a Free key was created (id ${id}); its secret is in ${file} (readable by this user only)` +
      (process.stderr.isTTY ? `:\n${secret}` : '') +
      `\npetstore: make more with: ${commandName()} keys create --plan pro --name NAME${where}`,
  )
}

/** `data/petstore.db` → `data/petstore-bootstrap-key.txt`, absolute. */
function bootstrapKeyFile(dataFile: string): string {
  return resolve(dirname(dataFile), `${basename(dataFile).replace(/\.db$/, '')}-bootstrap-key.txt`)
}

/** How the user ran us: the binary by the name they typed, or the sources through Bun. */
function commandName(): string {
  return Bun.main.startsWith('/$bunfs/') || Bun.main.startsWith('B:/~BUN/') ? 'petstore' : `bun ${relative(process.cwd(), Bun.main) || Bun.main}`
}
