/**
 * The commit worker: a thread with its own connection to the data file that commits batches of new
 * pets, so that the fsync of each batch does not stop the main thread's event loop. A separate entry
 * point of the build (package.json), started by WorkerPetWriter.
 */
import { openPetCommitter } from '../../storage/sqlite'
import { StorageUnavailableError } from '../../storage/types'
import { type CommitReply, type CommitRequest, type CommitResult, commitBatch, type PetBatch } from './writer'

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
    return { kind: 'committed', outcomes: commitBatch(committer.pets, batch) }
  } catch (error) {
    if (error instanceof StorageUnavailableError) return { kind: 'unavailable', code: error.code }
    const { message, stack } = error instanceof Error ? error : new Error(String(error))
    return { kind: 'failed', message, stack: stack ?? message }
  }
}
