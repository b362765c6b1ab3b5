/**
 * /metrics carries the process's own figures under the names Prometheus' client libraries use, so a
 * stock Node.js dashboard reads them: checked against the binary's answer, each value against what
 * the kernel says of the same process (/proc); the event loop's lag is a small number of seconds on an
 * idle server.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { readdirSync, readFileSync } from 'node:fs'
import { type Server, startServer } from '../support/binary'

setDefaultTimeout(60_000)
let server: Server | undefined
afterAll(async () => {
  await server?.stop()
})

/** The unlabelled samples of a text exposition, with their declared types. */
function samples(text: string): { values: Map<string, number>; types: Map<string, string> } {
  const values = new Map<string, number>()
  const types = new Map<string, string>()
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (type) types.set(type[1]!, type[2]!)
    const sample = /^([a-z_]+) (\S+)$/.exec(line)
    if (sample) values.set(sample[1]!, Number(sample[2]))
  }
  return { values, types }
}

describe('/metrics process figures', () => {
  test('memory, heap, CPU, start time, descriptors and event-loop lag, named as prom-client names them', async () => {
    server = await startServer()
    const { values, types } = samples(await (await fetch(`${server.origin}/metrics`)).text())
    const pid = server.proc.pid
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const rssKernel = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)![1]) * 1024
    const openKernel = readdirSync(`/proc/${pid}/fd`).length
    const maxKernel = Number(/^Max open files\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'))![1])
    const started = Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[19]) // in clock ticks after boot

    expect(types.get('process_cpu_seconds_total')).toBe('counter')
    expect(values.get('process_cpu_seconds_total')).toBeGreaterThan(0)
    expect(Math.abs(values.get('process_resident_memory_bytes')! - rssKernel)).toBeLessThan(32 * 1024 * 1024)
    expect(values.get('nodejs_heap_size_used_bytes')).toBeGreaterThan(0)
    expect(values.get('nodejs_heap_size_total_bytes')).toBeGreaterThan(0)
    expect(Math.abs(values.get('process_open_fds')! - openKernel)).toBeLessThanOrEqual(8)
    expect(values.get('process_max_fds')).toBe(maxKernel)
    const bootSeconds = Date.now() / 1000 - Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0])
    expect(Math.abs(values.get('process_start_time_seconds')! - (bootSeconds + started / 100))).toBeLessThan(5)
    expect(types.get('nodejs_eventloop_lag_seconds')).toBe('gauge')
    expect(values.get('nodejs_eventloop_lag_seconds')).toBeGreaterThanOrEqual(0)
    expect(values.get('nodejs_eventloop_lag_seconds')).toBeLessThan(1)
  })
})
