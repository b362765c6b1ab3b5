/**
 * The process's own figures for /metrics, named as Prometheus' client libraries name them (prom-client's
 * default metrics), so existing dashboards and alerts read them as they are: memory, heap, CPU time,
 * start time, descriptors (Linux, from /proc) and the event loop's lag.
 */
import { readdirSync, readFileSync } from 'node:fs'
import type { Figure } from './metrics'

const START_SECONDS = Date.now() / 1000 - process.uptime()
const LAG_EVERY_MS = 500

/**
 * How late the event loop ran a timer due every 500 ms, at its last run: what a busy main thread costs
 * each request behind it. One unref'd sampler per process, started by the first scrape.
 */
let lagSeconds = 0
let sampler: ReturnType<typeof setInterval> | undefined
function sampleLag(): void {
  let due = performance.now() + LAG_EVERY_MS
  sampler = setInterval(() => {
    const now = performance.now()
    lagSeconds = Math.max(0, now - due) / 1000
    due = now + LAG_EVERY_MS
  }, LAG_EVERY_MS)
  sampler.unref()
}

/** Open descriptors and their limit, where /proc tells them (Linux); null elsewhere. */
function descriptors(): { open: number; max: number } | null {
  try {
    // The listing opens one descriptor of its own for the folder, which is not counted.
    const open = readdirSync('/proc/self/fd').length - 1
    const limit = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1]
    return { open, max: limit === undefined || limit === 'unlimited' ? -1 : Number(limit) }
  } catch {
    return null
  }
}

export function processFigures(): Record<string, Figure> {
  if (!sampler) sampleLag()
  const memory = process.memoryUsage()
  const cpu = process.cpuUsage()
  const fds = descriptors()
  return {
    process_cpu_user_seconds_total: { help: 'User CPU time spent in seconds.', value: cpu.user / 1e6, type: 'counter' },
    process_cpu_system_seconds_total: { help: 'System CPU time spent in seconds.', value: cpu.system / 1e6, type: 'counter' },
    process_cpu_seconds_total: {
      help: 'Total user and system CPU time spent in seconds.',
      value: (cpu.user + cpu.system) / 1e6,
      type: 'counter',
    },
    process_start_time_seconds: { help: 'Start time of the process since unix epoch in seconds.', value: START_SECONDS },
    process_resident_memory_bytes: { help: 'Resident memory size in bytes.', value: memory.rss },
    nodejs_heap_size_total_bytes: { help: 'Process heap size from the JavaScript engine in bytes.', value: memory.heapTotal },
    nodejs_heap_size_used_bytes: { help: 'Process heap size used from the JavaScript engine in bytes.', value: memory.heapUsed },
    nodejs_eventloop_lag_seconds: { help: 'Lag of event loop in seconds.', value: lagSeconds },
    ...(fds && {
      process_open_fds: { help: 'Number of open file descriptors.', value: fds.open },
      ...(fds.max >= 0 && { process_max_fds: { help: 'Maximum number of open file descriptors.', value: fds.max } }),
    }),
  }
}
