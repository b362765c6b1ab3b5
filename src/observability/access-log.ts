/**
 * One JSON line per request on stdout, buffered and written in batches so a slow terminal or pipe
 * never sits on the request path.
 */

export interface LogSink {
  write(text: string): unknown
  flush(): unknown
}

export class AccessLog {
  private pending = ''
  private pendingLines = 0
  private readonly timer: ReturnType<typeof setInterval>

  constructor(
    private readonly sink: LogSink,
    flushEveryMs = 50,
  ) {
    this.timer = setInterval(() => this.flush(), flushEveryMs)
    this.timer.unref()
  }

  /** Queues one line: a complete JSON object without the newline. */
  write(line: string): void {
    this.pending += `${line}\n`
    if (++this.pendingLines >= 1024) this.flush()
  }

  flush(): void {
    if (this.pendingLines === 0) return
    const text = this.pending
    this.pending = ''
    this.pendingLines = 0
    this.sink.write(text)
    this.sink.flush()
  }

  close(): void {
    clearInterval(this.timer)
    this.flush()
  }
}
