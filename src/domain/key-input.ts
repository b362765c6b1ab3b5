/**
 * What a new key's input (or a plan change's) may be: a known plan, own limits for an enterprise key only,
 * a short name. A broken rule names its field, which each adapter phrases its own way (`--rpm`, `rpm`).
 * Needs nothing of Bun, so the console's page is type-checked against the schemas built from it.
 */
import type { Range } from './ban-rule'
import { CONTROL_CHARACTERS } from './pet'
import { CUSTOM_PLAN, type Limits, type Plan, PLAN_LIMITS, PLANS } from './plans'

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
const CONTROL = new RegExp(`[${CONTROL_CHARACTERS}]`)

export class KeyInputError extends Error {
  constructor(
    readonly field: KeyField,
    /** The rule broken, as a sentence naming each field as `name` does. */
    readonly rule: (name: (field: KeyField) => string) => string,
  ) {
    super(rule((field) => field))
  }
}

export function limitsFor(input: CreateKeyInput): Limits {
  if (!PLANS.includes(input.plan as Plan))
    throw new KeyInputError('plan', (n) => `${n('plan')} must be one of ${PLANS.join(', ')}, not "${input.plan}"`)
  if (input.plan === CUSTOM_PLAN) {
    if (input.rpm === undefined || input.rpd === undefined)
      throw new KeyInputError('rpm', (n) => `an enterprise key needs its own limits: ${n('rpm')} N ${n('rpd')} N`)
    for (const field of ['rpm', 'rpd'] as const) {
      const value = input[field]!
      if (!Number.isInteger(value) || value < CUSTOM_LIMIT.min || value > CUSTOM_LIMIT.max)
        throw new KeyInputError(field, (n) => `${n(field)} must be an integer from ${CUSTOM_LIMIT.min} to ${CUSTOM_LIMIT.max}`)
    }
    return { rpm: input.rpm, rpd: input.rpd }
  }
  if (input.rpm !== undefined || input.rpd !== undefined)
    throw new KeyInputError('rpm', (n) => `${n('rpm')} and ${n('rpd')} are only for ${n('plan')} enterprise`)
  return PLAN_LIMITS[input.plan as keyof typeof PLAN_LIMITS]
}

export function checkKeyName(name = ''): string {
  if (name.length > KEY_NAME_MAX || CONTROL.test(name))
    throw new KeyInputError('name', (n) => `${n('name')} must be at most ${KEY_NAME_MAX} characters with no control characters`)
  return name
}
