/**
 * One JSON line per request on stdout, buffered and written in batches so a slow terminal or pipe
 * never sits on the request path.
 */

export interface LogSink {
  write(text: string): unknown
  flush(): unknown
}

export class AccessLog {
  private pending: string[] = []
  private readonly timer: ReturnType<typeof setInterval>

  constructor(
    private readonly sink: LogSink,
    flushEveryMs = 50,
  ) {
    this.timer = setInterval(() => this.flush(), flushEveryMs)
    this.timer.unref()
  }

  write(entry: Record<string, unknown>): void {
    this.pending.push(JSON.stringify(entry))
    if (this.pending.length >= 512) this.flush()
  }

  flush(): void {
    if (this.pending.length === 0) return
    const text = `${this.pending.join('\n')}\n`
    this.pending = []
    this.sink.write(text)
    this.sink.flush()
  }

  close(): void {
    clearInterval(this.timer)
    this.flush()
  }
}
