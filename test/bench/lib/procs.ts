/**
 * Child processes of the benchmark: every one is tracked and killed when the harness ends, whether it
 * finishes, fails or is interrupted. Also reads a process's memory and CPU time from /proc.
 */
import type { Subprocess } from 'bun'
import { readFileSync } from 'node:fs'

const children = new Set<Subprocess>()
const cleanups: (() => void)[] = []
let installed = false

function killAll(): void {
  for (const child of children) {
    try {
      child.kill('SIGKILL')
    } catch {}
  }
  children.clear()
  for (const cleanup of cleanups.splice(0)) {
    try {
      cleanup()
    } catch {}
  }
}

/** Kills every tracked child on exit and on SIGINT/SIGTERM/SIGHUP; runs the cleanups once. */
export function installExitHandlers(): void {
  if (installed) return
  installed = true
  process.on('exit', killAll)
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const)
    process.on(signal, () => {
      console.error(`bench: ${signal} received, stopping every process it started`)
      killAll()
      process.exit(130)
    })
}

export function onCleanup(cleanup: () => void): void {
  cleanups.push(cleanup)
}

export function runCleanups(): void {
  killAll()
}

export function track<T extends Subprocess>(child: T): T {
  children.add(child)
  void child.exited.then(() => children.delete(child))
  return child
}

/** Stops a child: the signal first, SIGKILL after `graceMs`. Resolves with its exit code. */
export async function stop(child: Subprocess, signal: NodeJS.Signals = 'SIGTERM', graceMs = 5_000): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode
  try {
    child.kill(signal)
  } catch {}
  const timer = setTimeout(() => {
    try {
      child.kill('SIGKILL')
    } catch {}
  }, graceMs)
  await child.exited
  clearTimeout(timer)
  children.delete(child)
  return child.exitCode
}

/** Reads a stream to its end, keeping the text (its last `keep` characters) and waking waiters. */
export class StreamTail {
  text = ''
  private waiters: (() => void)[] = []
  readonly done: Promise<void>

  constructor(
    stream: ReadableStream<Uint8Array>,
    private readonly keep = 1 << 20,
  ) {
    this.done = this.drain(stream)
  }

  private async drain(stream: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder()
    try {
      for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) {
        this.text += decoder.decode(chunk, { stream: true })
        if (this.text.length > this.keep * 2) this.text = this.text.slice(-this.keep)
        this.wake()
      }
    } catch {}
    this.wake()
  }

  private wake(): void {
    for (const waiter of this.waiters.splice(0)) waiter()
  }

  /** Resolves with the first match of `pattern`, or rejects after `timeoutMs` or when the stream ends. */
  async waitFor(pattern: RegExp, timeoutMs: number, exited?: Promise<unknown>): Promise<RegExpExecArray> {
    const deadline = performance.now() + timeoutMs
    let ended = false
    void this.done.then(() => (ended = true))
    let gone = false
    void exited?.then(() => (gone = true))
    for (;;) {
      const match = pattern.exec(this.text)
      if (match) return match
      if (ended || gone) throw new Error(`process ended before printing ${pattern}:\n${this.text.slice(-2000)}`)
      const left = deadline - performance.now()
      if (left <= 0) throw new Error(`timed out waiting for ${pattern}:\n${this.text.slice(-2000)}`)
      await Promise.race([
        new Promise<void>((resolve) => this.waiters.push(resolve)),
        Bun.sleep(Math.min(left, 100)),
        ...(exited ? [exited] : []),
      ])
    }
  }
}

export interface MemoryStatus {
  /** Peak resident set size (VmHWM), MiB. */
  peakRssMb: number
  /** Current resident set size (VmRSS), MiB. */
  rssMb: number
}

export function memoryOf(pid: number): MemoryStatus | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN)
    return { peakRssMb: round(kb('VmHWM') / 1024, 1), rssMb: round(kb('VmRSS') / 1024, 1) }
  } catch {
    return null
  }
}

const CLOCK_TICKS = 100

/** CPU seconds (user + system) a process has used so far, or NaN when it cannot be read. */
export function cpuSecondsOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // Fields after the command name, which is in parentheses and may contain spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
  } catch {
    return NaN
  }
}

/** CPU seconds all CPUs have spent busy since boot (from /proc/stat), or NaN. */
export function systemBusySeconds(): number {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!
    const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number) as number[]
    void idle
    void iowait
    return (user! + nice! + system! + irq! + softirq! + steal!) / CLOCK_TICKS
  } catch {
    return NaN
  }
}

export function round(value: number, digits = 2): number {
  if (!Number.isFinite(value)) return value
  const scale = 10 ** digits
  return Math.round(value * scale) / scale
}

export function median(values: number[]): number {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b)
  if (sorted.length === 0) return NaN
  const mid = sorted.length >> 1
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** The environment without PETSTORE_* variables, so the developer's settings do not leak in. */
export function cleanEnv(): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) if (!name.startsWith('PETSTORE_') && value !== undefined) env[name] = value
  return env
}
