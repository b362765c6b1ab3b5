/**
 * Commands that only read never upgrade the schema: the older binary must still open the data file or
 * database (and a backup taken now) afterwards, so going back stays possible.
 */
import { StorageOpenError } from '../../domain/repositories'

export function olderSchemaRefused(where: string, version: number, current: number): StorageOpenError {
  return new StorageOpenError(
    `${where} is at schema ${version} and this petstore reads only schema ${current}; commands that only read ` +
      'leave it as it is: petstore serve, or a command that writes, upgrades it (take a backup first; see docs/upgrading.md)',
  )
}
