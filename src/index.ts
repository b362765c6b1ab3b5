#!/usr/bin/env bun
/** Entry point of the `petstore` binary: the only module that does anything when loaded. */
import { main } from './cli'

const code = await main(process.argv.slice(2))
process.exitCode = code
