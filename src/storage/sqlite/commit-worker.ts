/**
 * The commit worker: a thread with its own connection to the data file that commits batches of new pets,
 * so each batch's fsync does not stop the main thread. A separate entry point of the build
 * (scripts/build.ts), started by WorkerPetWriter.
 */
import { BatchRolledBackError, type PetBatch, StorageDamagedError, StorageUnavailableError } from '../../domain/repositories'
import { openPetCommitter } from './index'
import type { CommitReply, CommitRequest, CommitResult } from './writer'

declare var self: Worker

let file = ''
let committer: ReturnType<typeof openPetCommitter> | undefined

self.onmessage = ({ data: request }: MessageEvent<CommitRequest>) => {
  if (request.kind === 'open') file = request.file
  else if (request.kind === 'commit') {
    const reply: CommitReply = { ...commit(request.batch), seq: request.seq }
    self.postMessage(reply)
  } else {
    committer?.close()
    process.exit(0)
  }
}

function commit(batch: PetBatch): CommitResult {
  try {
    committer ??= openPetCommitter(file)
    return { kind: 'committed', outcomes: committer.pets.createMany(batch) }
  } catch (error) {
    if (error instanceof StorageUnavailableError) return { kind: 'unavailable', code: error.code }
    if (error instanceof StorageDamagedError) return { kind: 'damaged', code: error.code }
    const rolledBack = error instanceof BatchRolledBackError
    const reason = rolledBack ? error.reason : error
    const { message, stack } = reason instanceof Error ? reason : new Error(String(reason))
    return { kind: 'failed', message, stack: stack ?? message, rolledBack }
  }
}
