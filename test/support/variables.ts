/**
 * Every environment variable the server reads: each flag's in the flags table (src/config.ts) and each
 * environment's base URL. The tests that set them all take them from here, so that a flag added later
 * is covered without editing a list.
 */
import { CONFIG_FLAGS, ENVIRONMENTS } from '../../src/config'

export const SERVER_VARIABLES: readonly string[] = [
  ...Object.values(CONFIG_FLAGS).flatMap((row) => ('variable' in row && row.variable ? [row.variable] : [])),
  ...Object.values(ENVIRONMENTS).map((environment) => environment.baseUrlVariable),
]
