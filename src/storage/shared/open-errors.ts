/** Storage that cannot be opened, said in one line: the CLI prints it, a server exits 1 with it. */
import { StorageOpenError } from '../../domain/repositories'

/** A failure while opening: a StorageOpenError as it is, anything else after what was being done. */
export function openFailure(error: unknown, doing: string): StorageOpenError {
  return error instanceof StorageOpenError ? error : new StorageOpenError(`${doing}: ${(error as Error).message}`)
}

/** Runs `work`, its failure as openFailure says. */
export function opening<T>(doing: string, work: () => T): T {
  try {
    return work()
  } catch (error) {
    throw openFailure(error, doing)
  }
}

/**
 * Commands that only read never upgrade the schema: the older binary must still open the data file or
 * database (and a backup taken now) afterwards, so going back stays possible.
 */
export function olderSchemaRefused(where: string, version: number, current: number): StorageOpenError {
  return new StorageOpenError(
    `${where} is at schema ${version} and this petstore reads only schema ${current}; commands that only read ` +
      'leave it as it is: petstore serve, or a command that writes, upgrades it (take a backup first; see docs/upgrading.md)',
  )
}
