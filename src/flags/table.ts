/**
 * The flag framework every command and the server share: a table of rows (flag, variable, value, parser
 * with its range, default per environment, help line), read from a command line and the environment
 * (reader), and printed as usage lines from the same fields (flagLines). Knows no command and no server.
 */
import { integerRule, integerWithin } from '../domain/integer-range'
import type { Range } from '../domain/ban-rule'

/** The environments a default may differ by. */
export type EnvName = 'production' | 'staging'

export class ConfigError extends Error {}

export type Environment = Record<string, string | undefined>

/** What every row of a command's table says. */
interface Row {
  /** The flag without its dashes: 'ban-after' for --ban-after. */
  readonly flag: string
  /** The variable read when the flag is not given. */
  readonly variable?: string
  /**
   * The usage's description: its first line beside the flag, any more under it. Where the value comes
   * from when not given is not written here: the usage adds "(VARIABLE; default X, staging Y, notes)".
   */
  readonly help: string
  /** Said after the variable and the defaults in the usage's parentheses: "comma-separated". */
  readonly notes?: string
  /** The sub-commands it applies to, when not every one (cmd/options.ts refuses it with the others). */
  readonly only?: readonly string[]
}

/** A flag with a value: `parse` refuses a bad one under `name`, the flag or the variable it came from. */
export interface OptionFlag<T> extends Row {
  readonly kind: 'option'
  /** How its value is written in the usage: N, URL, HOST:PORT. */
  readonly value: string
  readonly parse: (text: string, name: string) => T
  /** The value when neither the flag nor its variable is given; none when it is optional. */
  readonly default?: (env: EnvName) => T
  /** How the usage writes the default of `env`: by default its value as text; for a default worked out elsewhere, the words. */
  readonly shownDefault?: (env: EnvName) => string
}

/** A repeatable flag; its variable is a comma-separated list. Parsed whole, from none given too. */
export interface ListFlag<T> extends Row {
  readonly kind: 'list'
  readonly value: string
  readonly parse: (texts: string[], name: string) => T
}

/** A flag without a value (--json, --no-access-log). */
export interface SwitchFlag extends Row {
  readonly kind: 'switch'
}

export type Flag = OptionFlag<unknown> | ListFlag<unknown> | SwitchFlag
export type FlagTable = Readonly<Record<string, Flag>>

export function option<T = string>(row: Omit<OptionFlag<T>, 'kind' | 'parse'> & Partial<Pick<OptionFlag<T>, 'parse'>>): OptionFlag<T> {
  return { kind: 'option', parse: (text) => text as T, ...row }
}
export const list = <T>(row: Omit<ListFlag<T>, 'kind'>): ListFlag<T> => ({ kind: 'list', ...row })
export const toggle = (row: Omit<SwitchFlag, 'kind'>): SwitchFlag => ({ kind: 'switch', ...row })

/** What a command line gives for a table's rows: the text of each flag (every text of a repeatable one; true for a switch). */
export type InputOf<T extends FlagTable> = {
  -readonly [K in keyof T]?: T[K] extends ListFlag<unknown> ? string[] : T[K] extends SwitchFlag ? boolean : string
}
/** A row's value once read. */
export type ValueOf<F> = F extends OptionFlag<infer T> ? T : F extends ListFlag<infer T> ? T : boolean

/** An environment variable's value, or undefined when unset or empty (`PETSTORE_PORT=` means no value). */
export function variable(environment: Environment, name: string): string | undefined {
  const value = environment[name]
  return value === '' ? undefined : value
}

/** A row's text, the flag's or else its variable's, with the name a complaint uses (where the user can find it). */
function given(row: Flag, text: string | string[] | boolean | undefined, environment: Environment) {
  if (text !== undefined || row.variable === undefined) return { name: `--${row.flag}`, text }
  const value = variable(environment, row.variable)
  return { name: row.variable, text: row.kind === 'list' && value !== undefined ? value.split(/[\s,]+/).filter(Boolean) : value }
}

/** The rows of `table` read from a command line's input and the environment. */
export function reader<T extends FlagTable>(table: T, input: InputOf<T>, environment: Environment) {
  return {
    /** Whether the flag or its variable was given, and the name a complaint about it must use. */
    given: (key: keyof T & string) => {
      const { name, text } = given(table[key]!, input[key], environment)
      return { name, given: text !== undefined }
    },
    /** The row's value: parsed from the flag or its variable, else its default (for the environment `env`). */
    value<K extends keyof T & string>(key: K, env: EnvName = 'production'): ValueOf<T[K]> | undefined {
      const row: Flag = table[key]!
      const { name, text } = given(row, input[key], environment)
      if (row.kind === 'switch') return (text === true) as ValueOf<T[K]>
      if (row.kind === 'list') return row.parse((text as string[] | undefined) ?? [], name) as ValueOf<T[K]>
      return (text === undefined ? row.default?.(env) : row.parse(text as string, name)) as ValueOf<T[K]> | undefined
    },
  }
}

/** A parser for whole numbers within `range`, which its complaint names. */
export const integer =
  ({ min, max }: Range) =>
  (text: string, name: string): number => {
    const value = integerWithin(text, min, max)
    if (value === undefined) throw new ConfigError(`${name} ${integerRule(min, max)}, not "${text}"`)
    return value
  }

/** Where a flag's description starts in the usage. */
const COLUMN = 29

/** A usage line as wide as this, at most, before the parentheses go to a line of their own. */
const WIDTH = 120

/** A table's rows as usage lines: the flag and its value, then its help (and the sub-commands it is for), continued in the column. */
export function flagLines(table: FlagTable): string {
  return Object.values(table)
    .map((row) => {
      const lines = (row.only ? `${row.help} (${row.only.join(', ')})` : row.help).split('\n')
      const whence = sources(row)
      if (whence) {
        const last = lines.length - 1
        if (COLUMN + lines[last]!.length + whence.length + 1 <= WIDTH) lines[last] += ` ${whence}`
        else lines.push(whence)
      }
      const [first, ...more] = lines
      const head = `  --${row.flag}${row.kind === 'switch' ? '' : ` ${row.value}`}  `.padEnd(COLUMN)
      return [head + first, ...more.map((line) => ' '.repeat(COLUMN) + line)].join('\n')
    })
    .join('\n')
}

/** Where a row's value comes from when the flag is not given, from its fields: "(VARIABLE; default X, staging Y, notes)". */
function sources(row: Flag): string {
  let text = row.variable ?? ''
  if (row.kind === 'option' && (row.default || row.shownDefault)) {
    const shown = (env: EnvName) => row.shownDefault?.(env) ?? String(row.default!(env))
    const production = shown('production')
    const staging = shown('staging')
    text += `${text ? '; ' : ''}default ${production}${staging === production ? '' : `, staging ${staging}`}`
  }
  if (row.notes) text += `${text ? ', ' : ''}${row.notes}`
  return text ? `(${text})` : ''
}
