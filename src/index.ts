#!/usr/bin/env bun
/** Entry point of the `petstore` binary: the only module that does anything when loaded (cmd/ dispatches). */
import { main } from './cmd'

const code = await main(process.argv.slice(2))
process.exitCode = code
