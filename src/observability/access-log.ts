/**
 * One JSON line per request on stdout, gathered and handed to the sink every 50 ms (or at 64 K
 * characters): Bun's sink writes at the end of every event-loop turn, so a line per request cost a
 * write(2) each, about 6 µs of CPU; gathered, under 1 µs. Bounded: when nobody reads stdout, lines
 * past the cap are dropped and counted, not piled up; a closed stdout (EPIPE) is said once on stderr.
 */

export interface LogSink {
  /** Bun's file sink: the bytes taken, or a promise of them when the write could not finish at once. */
  write(text: string): unknown
  /**
   * The bytes flushed, or a promise of them while the reader is behind; nothing (undefined) once the
   * sink is closed, as Bun's file sink answers after its reader went away.
   */
  flush(): number | Promise<number> | undefined
}

export interface AccessLogOptions {
  flushEveryMs?: number
  /** Bytes written but not yet taken by the reader, past which lines are dropped. */
  maxPendingBytes?: number
  /** Told once when the log stops for good, with the reason. */
  onClosed?: (reason: string) => void
}

/** Characters gathered before they are handed to the sink without waiting for the timer. */
const BATCH_CHARS = 64 * 1024

export class AccessLog {
  /** Lines dropped because the reader was behind, or because stdout was closed. */
  dropped = 0
  /** Lines not yet handed to the sink, each with its newline, and how many. */
  private batch = ''
  private batchLines = 0
  private unflushed = false
  /** Bytes written since the last flush that completed: an upper bound of what the sink holds. */
  private pending = 0
  private flushing = false
  private closed = false
  private readonly timer: ReturnType<typeof setInterval>
  private readonly maxPendingBytes: number

  constructor(
    private readonly sink: LogSink,
    private readonly options: AccessLogOptions = {},
  ) {
    this.maxPendingBytes = options.maxPendingBytes ?? 4 * 1024 * 1024
    this.timer = setInterval(() => this.flush(), options.flushEveryMs ?? 50)
    this.timer.unref()
  }

  /** Queues one line: a complete JSON object without the newline. */
  write(line: string): void {
    // Line length in UTF-16 units: within a factor of three of the bytes, and free to compute.
    if (this.closed || this.pending + line.length > this.maxPendingBytes) {
      this.dropped++
      return
    }
    this.pending += line.length + 1
    this.batch += `${line}\n`
    this.batchLines++
    if (this.batch.length >= BATCH_CHARS) this.handOver()
  }

  /** Gives the gathered lines to the sink in one write; false once the sink failed. */
  private handOver(): boolean {
    if (!this.batch) return true
    const text = this.batch
    this.batch = ''
    let written: unknown
    try {
      written = this.sink.write(text)
    } catch (error) {
      this.dropped += this.batchLines
      this.stop(error)
      return false
    }
    // Bun's file sink answers a write it cannot finish at once (a batch larger than the pipe takes) with
    // a promise, which rejects once the reader is gone (EPIPE): unheard, that rejection ends the process.
    if (written instanceof Promise) written.catch((error: unknown) => this.stop(error))
    this.batchLines = 0
    this.unflushed = true
    return true
  }

  flush(): void {
    if (this.closed || !this.handOver() || !this.unflushed || this.flushing) return
    this.unflushed = false
    let result: unknown
    try {
      result = this.sink.flush()
    } catch (error) {
      this.stop(error)
      return
    }
    // Bun's file sink answers a flush after its reader went away (EPIPE, swallowed on an earlier write)
    // with nothing at all, where a live sink answers with a count or a promise.
    if (result === undefined) {
      this.stop(Object.assign(new Error('stdout was closed'), { code: 'EPIPE' }))
      return
    }
    if (!(result instanceof Promise)) {
      this.pending = 0
      return
    }
    this.flushing = true
    const written = this.pending
    result.then(
      () => {
        this.flushing = false
        this.pending -= written
      },
      (error: unknown) => this.stop(error),
    )
  }

  close(): void {
    clearInterval(this.timer)
    this.flush()
    this.closed = true
  }

  private stop(error: unknown): void {
    if (this.closed) return
    this.closed = true
    clearInterval(this.timer)
    const code = (error as { code?: string })?.code
    this.options.onClosed?.(
      code === 'EPIPE' ? 'stdout was closed by its reader' : `stdout failed (${code ?? (error as Error)?.message ?? error})`,
    )
  }
}
