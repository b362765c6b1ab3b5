/**
 * One JSON line per request on stdout. Lines go straight into the sink's native buffer, which is
 * flushed every 50 ms (and by the sink itself when it fills): no request waits on the terminal or the
 * pipe, and no large string is built in JavaScript (one would cost a garbage collection per flush).
 */

export interface LogSink {
  write(text: string): unknown
  flush(): unknown
}

export class AccessLog {
  private unflushed = false
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
    this.sink.write(`${line}\n`)
    this.unflushed = true
  }

  flush(): void {
    if (!this.unflushed) return
    this.unflushed = false
    this.sink.flush()
  }

  close(): void {
    clearInterval(this.timer)
    this.flush()
  }
}
