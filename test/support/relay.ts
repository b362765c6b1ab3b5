/**
 * A TCP relay to a local port (Redis, in the limiter's tests) that can misbehave as a network does:
 * go silent (forward nothing either way, accept new connections and leave them unanswered, as when
 * packets are dropped without a reset), or hold each answer back for a while, or until told, in order.
 */
export interface Relay {
  port: number
  /** While true, nothing is forwarded and new connections are left unanswered. */
  silent: boolean
  /**
   * How long each chunk the target sends back (given) is held, in milliseconds; chunks keep their order.
   * Infinity holds it until release().
   */
  answerDelayMs: (chunk: Uint8Array) => number
  /** Told of each chunk a client sends, before it is forwarded. */
  sent: (chunk: Uint8Array) => void
  /** Sends every chunk held back, on every connection, in order. */
  release(): void
  /** Chunks held back right now, over every connection. */
  held(): number
  close(): void
}

type Upstream = Awaited<ReturnType<typeof Bun.connect>>

export function startRelay(targetPort: number): Relay {
  let heldChunks = 0
  const releasers = new Set<() => void>()
  const relay: Relay = {
    port: 0,
    silent: false,
    answerDelayMs: () => 0,
    sent: () => {},
    release: () => {
      for (const releaseAll of releasers) releaseAll()
    },
    held: () => heldChunks,
    close: () => {},
  }
  const server = Bun.listen<{ upstream?: Upstream; pending: Uint8Array[]; releaseAll?: () => void }>({
    hostname: '127.0.0.1',
    port: 0,
    socket: {
      async open(client) {
        client.data = { pending: [] }
        if (relay.silent) return
        // Answers held back, released in order: never before the one that came before.
        const held: { at: number; chunk: Uint8Array }[] = []
        const release = () => {
          for (; held.length > 0 && held[0]!.at <= performance.now(); heldChunks--) client.write(held.shift()!.chunk)
          if (held.length > 0 && held[0]!.at !== Infinity) setTimeout(release, Math.max(0, held[0]!.at - performance.now()))
        }
        const releaseAll = () => {
          for (const chunk of held) chunk.at = 0
          release()
        }
        releasers.add(releaseAll)
        client.data.releaseAll = releaseAll
        client.data.upstream = await Bun.connect({
          hostname: '127.0.0.1',
          port: targetPort,
          socket: {
            data: (_, chunk) => {
              if (relay.silent) return
              held.push({ at: performance.now() + Math.max(0, relay.answerDelayMs(chunk)), chunk: Uint8Array.from(chunk) })
              heldChunks++
              if (held.length === 1) release()
            },
            close: () => {
              client.end()
            },
          },
        })
        for (const chunk of client.data.pending.splice(0)) client.data.upstream.write(chunk)
      },
      data(client, chunk) {
        if (relay.silent) return
        relay.sent(chunk)
        if (client.data.upstream) client.data.upstream.write(chunk)
        else client.data.pending.push(Uint8Array.from(chunk))
      },
      close(client) {
        if (client.data.releaseAll) releasers.delete(client.data.releaseAll)
        client.data.upstream?.end()
      },
    },
  })
  relay.port = server.port
  relay.close = () => server.stop(true)
  return relay
}
