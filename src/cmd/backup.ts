/** `petstore backup FILE`: a consistent copy of the data file, safe while the server runs. */
import { COMMAND_BUSY_MS, openSqliteStorage } from '../storage/sqlite'
import { COMMON, dataFileFor, help, oneFile, parse } from './options'

export const USAGE = `Usage: petstore backup FILE

Writes a consistent copy of the data file to FILE (which must not exist), safe while the server runs.

${COMMON}`

export async function backup(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {}, USAGE)
  if (values.help) return help(USAGE)
  const target = oneFile(positionals, 'backup', USAGE)
  const file = dataFileFor(values, USAGE, 'backup copies the data file; with PostgreSQL, use pg_dump (see the README)')
  // As it is: the copy taken before an upgrade must still open in the binary it goes back to.
  const storage = openSqliteStorage(file, { mustExist: true, olderSchema: 'keep', busyTimeoutMs: COMMAND_BUSY_MS })
  try {
    storage.backup(target)
  } finally {
    storage.close()
  }
  console.error(`petstore: backup written to ${target} (a copy of ${file})`)
  return 0
}
