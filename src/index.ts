#!/usr/bin/env bun
/** Entry point of the `petstore` binary: the only module that does anything when loaded (cmd/ dispatches). */
import { writeSync } from 'node:fs'
import { format } from 'node:util'
import { serveSignals } from './cmd/serve-signals'

// Bun paints console.error red on a terminal, yet what the server and the CLI write to stderr is
// mostly information ("listening on…", "backup written…"): every line goes out as plain text, from
// every module at once, so no call site has to remember it. A stderr that is gone loses the line, as
// console.error would.
console.error = (...parts: unknown[]) => {
  try {
    writeSync(2, `${format(...parts)}\n`)
  } catch {}
}

const argv = process.argv.slice(2)
// Before the commands load (tens of milliseconds): a signal's default action meanwhile would end a
// server that is starting, as logrotate's SIGHUP would.
if (argv[0] === 'serve') serveSignals()
const { main } = await import('./cmd')
const code = await main(argv)
process.exitCode = code
