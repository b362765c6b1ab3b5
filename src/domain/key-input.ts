/**
 * What a new key's input (or a plan change's, or a roll's) may be: a known plan, own limits for an enterprise
 * key only, a short name, an overlap of at most a year. A broken rule is its field and which rule; each adapter phrases it in its own words.
 * Needs nothing of Bun, so the console's page is type-checked against the schemas built from it.
 */
import type { Range } from './ban-rule'
import { CONTROL_CHARACTERS } from './pet'
import { CUSTOM_PLAN, type Limits, type Plan, PLAN_LIMITS, PLANS } from './plans'
import { DAY_MS } from './time'

export interface CreateKeyInput {
  plan: string
  name?: string
  rpm?: number
  rpd?: number
}

export type KeyField = keyof CreateKeyInput

/** An enterprise key's own limits, per minute and per day. */
export const CUSTOM_LIMIT: Range = { min: 1, max: 1_000_000_000 }
export const KEY_NAME_MAX = 200
/** How long a roll keeps the previous secret working unless told, and at most. */
export const DEFAULT_OVERLAP_MS = DAY_MS
export const LONGEST_OVERLAP_MS = 365 * DAY_MS
/**
 * Characters no key name may hold: the controls, and the bidirectional formatting characters (ALM, LRM,
 * RLM, the embeddings and overrides, the isolates), which would turn `keys list` and the console's rows
 * around (U+202E shows the rest of a line right to left), as a pattern's class.
 */
export const KEY_NAME_FORBIDDEN = `${CONTROL_CHARACTERS}\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069`
const FORBIDDEN = new RegExp(`[${KEY_NAME_FORBIDDEN}]`)

/** The rules a key's input can break; each adapter phrases them in its own words. */
export type KeyRule = 'unknown-plan' | 'limits-needed' | 'limits-only-enterprise' | 'limit-range' | 'name'

export class KeyInputError extends Error {
  constructor(
    readonly field: KeyField,
    readonly rule: KeyRule,
    /** What was given, for a rule that quotes it (`unknown-plan`). */
    readonly given = '',
  ) {
    super(`${field}: ${rule}`)
  }
}

export function limitsFor(input: CreateKeyInput): Limits {
  if (!PLANS.includes(input.plan as Plan)) throw new KeyInputError('plan', 'unknown-plan', input.plan)
  if (input.plan === CUSTOM_PLAN) {
    if (input.rpm === undefined || input.rpd === undefined) throw new KeyInputError('rpm', 'limits-needed')
    for (const field of ['rpm', 'rpd'] as const) {
      const value = input[field]!
      if (!Number.isInteger(value) || value < CUSTOM_LIMIT.min || value > CUSTOM_LIMIT.max) throw new KeyInputError(field, 'limit-range')
    }
    return { rpm: input.rpm, rpd: input.rpd }
  }
  if (input.rpm !== undefined || input.rpd !== undefined) throw new KeyInputError('rpm', 'limits-only-enterprise')
  return PLAN_LIMITS[input.plan as keyof typeof PLAN_LIMITS]
}

export function checkKeyName(name = ''): string {
  if (name.length > KEY_NAME_MAX || FORBIDDEN.test(name)) throw new KeyInputError('name', 'name')
  return name
}
