/** `petstore restore FILE`: a backup in place of the data file, with the server stopped (storage/sqlite/restore.ts). */
import { resolve } from 'node:path'
import { restoreDataFile } from '../storage/sqlite'
import { COMMON, dataFileFor, help, oneFile, parse } from './options'

export const USAGE = `Usage: petstore restore FILE

Puts the backup FILE in place of the data file, with the server stopped (it refuses while one runs).
The backup is copied and checked first; the data file and its -wal and -shm are kept beside it as
FILE.before-restore-DATE (nothing is deleted). An interrupted restore is finished by running it again.

${COMMON}`

export async function restore(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {}, USAGE)
  if (values.help) return help(USAGE)
  const given = oneFile(positionals, 'restore', USAGE)
  // Through a link, into the file it names (dataFileFor): the one a server on any of its names holds the lock of.
  const file = dataFileFor(values, USAGE, 'restore replaces the data file; with PostgreSQL, use pg_restore (see the README)')
  const backup = resolve(given)
  const done = restoreDataFile(file, backup, Date.now())
  const kept = done.keptParts.length ? `the previous data file is kept as ${done.keptParts.join(', ')}` : 'there was no data file before'
  if (!done.resumed) {
    console.error(`petstore: restored ${backup} into ${file}; ${kept}`)
    return 0
  }
  console.error(`petstore: finished an interrupted restore of ${done.backup} into ${file}; ${kept}`)
  if (done.backup === backup) return 0
  console.error(`petstore: ${backup} was not restored; run petstore restore again to restore it instead`)
  return 1
}
