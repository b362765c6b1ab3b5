/**
 * The `petstore` command line: one file per command, each with its own usage. Flags win over their
 * variables; every mistake ends with a one-line reason (last, where a terminal leaves it in view) and a
 * non-zero exit.
 */
import { versionLine } from '../server/build-info'
import { ConfigError } from '../config'
import { StorageOpenError, StorageUnavailableError } from '../domain/repositories'
import * as backup from './backup'
import * as healthcheck from './healthcheck'
import * as keys from './keys'
import * as operators from './operators'
import { bareUsage, help, isBare, UsageError } from './options'
import * as pets from './pets'
import * as restore from './restore'
import * as serve from './serve'

const USAGE = `Usage: petstore COMMAND [options]

Commands:
  serve                      run the server
  help [COMMAND]             show the usage of petstore or of one command
  keys create|list|revoke|reset-limits|set-plan|usage   manage API keys, see their use
  operators add|list|remove|reset-password|token   manage the console's operators
  pets seed|reset            add sample pets, or delete every pet (keys are kept)
  backup FILE                write a consistent copy of the data file
  restore FILE               put a backup in place of the data file (the server stopped)
  healthcheck                exit 0 when the local server answers /healthz (for container health checks)

Options:
  --help                     show usage (also after a command: petstore serve --help)
  --version                  print the version, the commit and the build date

Run 'petstore COMMAND --help' for a command's options.`

/** Each command: its usage (for `help COMMAND`) and what it runs. */
const COMMANDS: Record<string, { USAGE: string; run(args: string[]): Promise<number> }> = {
  serve: { USAGE: serve.USAGE, run: serve.serve },
  keys: { USAGE: keys.USAGE, run: keys.keys },
  operators: { USAGE: operators.USAGE, run: operators.operators },
  pets: { USAGE: pets.USAGE, run: pets.pets },
  backup: { USAGE: backup.USAGE, run: backup.backup },
  restore: { USAGE: restore.USAGE, run: restore.restore },
  healthcheck: { USAGE: healthcheck.USAGE, run: healthcheck.healthcheck },
}

export async function main(argv: string[]): Promise<number> {
  try {
    return await run(argv)
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`${error.usage}\n\npetstore: ${error.message}`)
      return 2
    }
    if (error instanceof ConfigError || error instanceof StorageOpenError || error instanceof StorageUnavailableError) {
      console.error(`petstore: ${error.message}`)
      return 1
    }
    // Anything else is a bug; one line says what, instead of a stack trace.
    console.error(`petstore: unexpected error: ${(error as Error)?.message ?? error}`)
    return 70
  }
}

async function run(argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  if (isBare(command)) return bareUsage(command, USAGE, `no command given; commands are ${Object.keys(COMMANDS).join(', ')}`)
  if (command === '--version' || command === '-v') {
    console.log(versionLine())
    return 0
  }
  if (command === 'help') return helpFor(rest)
  const chosen = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined
  if (!chosen) throw new UsageError(`unknown command "${command}"`, USAGE)
  return chosen.run(rest)
}

function helpFor(args: string[]): number {
  if (args.length === 0) return help(USAGE)
  const topic = args[0]!
  if (args.length > 1 || !Object.hasOwn(COMMANDS, topic))
    throw new UsageError(`no help for "${args.join(' ')}"; commands are ${Object.keys(COMMANDS).join(', ')}`, USAGE)
  return help(COMMANDS[topic]!.USAGE)
}
