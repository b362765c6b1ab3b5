/**
 * The `petstore` command line: one file per command, each with its own usage. Flags win over their
 * variables; every mistake ends with a one-line reason (last, where a terminal leaves it in view) and a
 * non-zero exit.
 */
import { versionLine } from '../server/build-info'
import { ConfigError } from '../config'
import { StorageOpenError, StorageUnavailableError } from '../domain/repositories'
import { bareUsage, help, isBare, UsageError } from './options'

const USAGE = `Usage: petstore COMMAND [options]

Commands:
  serve                      run the server
  help [COMMAND]             show the usage of petstore or of one command
  keys create|list|revoke|roll|reset-limits|set-plan|set-expiry|usage
                             manage API keys, see their use
  operators add|list|remove|reset-password|token   manage the console's operators
  pets seed|reset            add sample pets, or delete every pet (keys are kept)
  backup FILE                write a consistent copy of the data file
  restore FILE               put a backup in place of the data file (the server stopped)
  healthcheck                exit 0 when the local server answers /healthz (for container health checks)

Options:
  --help                     show usage (also after a command: petstore serve --help)
  --version                  print the version and the commit (a built binary also its build time)

Run 'petstore COMMAND --help' for a command's options.`

interface Command {
  USAGE: string
  run(args: string[]): Promise<number>
}

/**
 * Each command, loaded when it is asked for: its usage (for `help COMMAND`) and what it runs. A command
 * loads only its own modules, so `keys list` or `healthcheck` does not first load the server's
 * (about a tenth of a second of CPU at every call).
 */
const COMMANDS: Record<string, () => Promise<Command>> = {
  serve: () => import('./serve').then((command) => ({ USAGE: command.USAGE, run: command.serve })),
  keys: () => import('./keys').then((command) => ({ USAGE: command.USAGE, run: command.keys })),
  operators: () => import('./operators').then((command) => ({ USAGE: command.USAGE, run: command.operators })),
  pets: () => import('./pets').then((command) => ({ USAGE: command.USAGE, run: command.pets })),
  backup: () => import('./backup').then((command) => ({ USAGE: command.USAGE, run: command.backup })),
  restore: () => import('./restore').then((command) => ({ USAGE: command.USAGE, run: command.restore })),
  healthcheck: () => import('./healthcheck').then((command) => ({ USAGE: command.USAGE, run: command.healthcheck })),
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
  return (await chosen()).run(rest)
}

async function helpFor(args: string[]): Promise<number> {
  if (args.length === 0) return help(USAGE)
  const topic = args[0]!
  if (args.length > 1 || !Object.hasOwn(COMMANDS, topic))
    throw new UsageError(`no help for "${args.join(' ')}"; commands are ${Object.keys(COMMANDS).join(', ')}`, USAGE)
  return help((await COMMANDS[topic]!()).USAGE)
}
