/**
 * The main thread's side of the commit worker (commit-worker.ts): a file database is committed by a
 * worker thread with its own connection, so the event loop keeps serving reads while a batch is fsynced.
 */
import type { CreatePetOutcome } from '../../domain/idempotency'
import {
  BatchRolledBackError,
  type PetBatch,
  type PetWriter,
  StorageDamagedError,
  StorageUnavailableError,
} from '../../domain/repositories'

export type CommitRequest = { kind: 'open'; file: string } | { kind: 'commit'; seq: number; batch: PetBatch } | { kind: 'close' }

export type CommitResult =
  | { kind: 'committed'; outcomes: CreatePetOutcome[] }
  | { kind: 'unavailable'; code: string }
  | { kind: 'damaged'; code: string }
  /** `rolledBack`: the transaction failed and wrote nothing; otherwise the batch's fate is unknown. */
  | { kind: 'failed'; message: string; stack: string; rolledBack: boolean }

/** `seq` is the batch's: an answer is only ever given to the batch it is about. */
export type CommitReply = CommitResult & { seq: number }

/**
 * The worker keeps the process alive only while it has a batch or is closing. Should the thread stop on
 * its own, its batch fails (a 500: what Idempotency-Keys are for) and the next batch starts a new thread.
 */
export class WorkerPetWriter implements PetWriter {
  private worker: Worker | null = null
  private closing = false
  private stopped: Promise<void> = Promise.resolve()
  private waiting: { resolve: (outcomes: CreatePetOutcome[]) => void; reject: (error: unknown) => void } | null = null
  private seq = 0

  /** `script` is commit-worker.ts, resolved by the caller (see backends.ts for why). */
  constructor(
    private readonly script: URL,
    private readonly file: string,
  ) {
    this.start()
  }

  write(batch: PetBatch): Promise<CreatePetOutcome[]> {
    if (this.closing) return Promise.reject(new Error('the commit worker has been closed'))
    const worker = this.worker ?? this.start()
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject }
      worker.ref()
      worker.postMessage({ kind: 'commit', seq: ++this.seq, batch } satisfies CommitRequest)
    })
  }

  async close(): Promise<void> {
    this.closing = true
    if (this.worker) {
      this.worker.ref()
      this.worker.postMessage({ kind: 'close' } satisfies CommitRequest)
    }
    await this.stopped
  }

  private start(): Worker {
    const worker = new Worker(this.script)
    worker.unref()
    worker.onmessage = (event: MessageEvent<CommitReply>) => this.settle(worker, event.data)
    worker.onerror = (event: ErrorEvent) => this.end(worker)?.reject(event.error ?? new Error(event.message))
    this.stopped = new Promise((resolve) =>
      worker.addEventListener('close', () => {
        if (this.worker === worker) this.worker = null
        this.end(worker)?.reject(new Error('the commit worker stopped; the next batch starts a new one'))
        resolve()
      }),
    )
    worker.postMessage({ kind: 'open', file: this.file } satisfies CommitRequest)
    this.worker = worker
    return worker
  }

  private settle(worker: Worker, reply: CommitReply): void {
    if (reply.seq !== this.seq) return
    if (reply.kind === 'committed') this.end(worker)?.resolve(reply.outcomes)
    else if (reply.kind === 'unavailable') this.end(worker)?.reject(new StorageUnavailableError(reply.code))
    else if (reply.kind === 'damaged') this.end(worker)?.reject(new StorageDamagedError(reply.code))
    else {
      const error = Object.assign(new Error(reply.message), { stack: reply.stack })
      this.end(worker)?.reject(reply.rolledBack ? new BatchRolledBackError(error) : error)
    }
  }

  /** The batch that was waiting, if any; the worker no longer keeps the process alive for it. */
  private end(worker: Worker): typeof this.waiting {
    const waiting = this.waiting
    this.waiting = null
    worker.unref()
    return waiting
  }
}
