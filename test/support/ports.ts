/**
 * Ports nothing listens on right now, for a program a test must tell its port before it starts
 * (PostgreSQL, Redis, nginx, the binary's --port or --console-address when the test names them): tests
 * never use fixed ports. A server of ours that can say which port it got is started on port 0 instead.
 *
 * Picked at random below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), not
 * from the kernel's port 0: a port from that range, let go after the pick, was now and then taken by
 * another job's outgoing connection (its local port) before the program bound it ("cannot listen …
 * in use"), and two picks in a row could name the same port. Below the range only another listener
 * can hold one, which the probe finds; the ports of one call are held together, so they differ.
 */
import { readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:net'

/** The lowest port the kernel gives to outgoing connections (and port 0); 32768 on Linux by default. */
function ephemeralLow(): number {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 32_768
  } catch {
    return 32_768
  }
}

const LOW = 20_000
const HIGH = Math.max(LOW + 1_000, ephemeralLow())

/** Listens on `port` at 127.0.0.1, or null when something holds it. */
function hold(port: number): Promise<Server | null> {
  return new Promise((resolve) => {
    const server = createServer()
    server.once('error', () => resolve(null))
    server.listen(port, '127.0.0.1', () => resolve(server))
  })
}

/** `count` numbers, as a tuple of that length. */
type Ports<N extends number, T extends number[] = []> = T['length'] extends N ? T : Ports<N, [...T, number]>

/** `count` distinct ports nothing listens on right now. */
export async function freePorts<N extends number>(count: N): Promise<Ports<N>> {
  const held: Server[] = []
  try {
    for (let tries = 0; held.length < count; tries++) {
      if (tries > 1_000) throw new Error(`no free port found between ${LOW} and ${HIGH} in 1,000 tries`)
      const server = await hold(LOW + Math.floor(Math.random() * (HIGH - LOW)))
      if (server) held.push(server)
    }
    return held.map((server) => (server.address() as { port: number }).port) as Ports<N>
  } finally {
    await Promise.all(held.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))))
  }
}

/** One port nothing listens on right now. */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!
}
