/**
 * One JSON line per request on stdout. Lines go straight into the sink's native buffer, which is
 * flushed every 50 ms (and by the sink itself when it fills): no request waits on the terminal or the
 * pipe, and no large string is built in JavaScript (one would cost a garbage collection per flush).
 *
 * What the log may hold is bounded: when stdout is slow or nobody reads it, lines past the cap are
 * dropped and counted instead of piling up in memory, and the server keeps serving. When stdout is
 * closed (EPIPE), the log says so once on stderr and stops.
 */

export interface LogSink {
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

export class AccessLog {
  /** Lines dropped because the reader was behind, or because stdout was closed. */
  dropped = 0
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
    try {
      this.sink.write(`${line}\n`)
    } catch (error) {
      this.stop(error)
      return
    }
    this.unflushed = true
  }

  flush(): void {
    if (!this.unflushed || this.flushing || this.closed) return
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
    this.options.onClosed?.(code === 'EPIPE' ? 'stdout was closed by its reader' : `stdout failed (${code ?? (error as Error)?.message ?? error})`)
  }
}
