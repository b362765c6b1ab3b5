import { describe, expect, test } from 'bun:test'
import { asUsageError, UsageError } from '../../src/cmd/options'
import { CUSTOM_LIMIT, checkKeyName, type CreateKeyInput, KeyInputError, limitsFor } from '../../src/domain/key-input'
import { keyRuleMessage } from '../../src/modules/console/service'

/** The broken rule, phrased as the command line (flags) and as the console (body fields) phrase it. */
function refusal(check: () => unknown): { field: string; cli: string; console: string } {
  try {
    check()
  } catch (error) {
    if (!(error instanceof KeyInputError)) throw error
    let cli = ''
    try {
      asUsageError(check, 'usage')
    } catch (usage) {
      if (usage instanceof UsageError) cli = usage.message
    }
    return { field: error.field, cli, console: keyRuleMessage(error) }
  }
  throw new Error('no refusal')
}

describe("a key's input rules: one rule, phrased by each adapter in its own words", () => {
  const cases: [CreateKeyInput, string, string, string][] = [
    [
      { plan: 'gold' },
      'plan',
      '--plan must be one of free, pro, business, enterprise, not "gold"',
      'plan: must be one of free, pro, business, enterprise, not "gold"',
    ],
    [
      { plan: 'enterprise', rpm: 5 },
      'rpm',
      'an enterprise key needs its own limits: --rpm N --rpd N',
      'rpm: an enterprise key needs rpm and rpd',
    ],
    [
      { plan: 'pro', rpd: 5 },
      'rpm',
      '--rpm and --rpd are only for --plan enterprise',
      'rpm: only an enterprise key has its own rpm and rpd',
    ],
    [
      { plan: 'enterprise', rpm: 5, rpd: CUSTOM_LIMIT.max + 1 },
      'rpd',
      '--rpd must be an integer from 1 to 1000000000',
      'rpd: must be an integer from 1 to 1000000000',
    ],
    [
      { plan: 'enterprise', rpm: 0.5, rpd: 5 },
      'rpm',
      '--rpm must be an integer from 1 to 1000000000',
      'rpm: must be an integer from 1 to 1000000000',
    ],
  ]
  test.each(cases)('%o', (input, field, cli, console) => {
    expect(refusal(() => limitsFor(input))).toEqual({ field, cli, console })
  })

  test('a name of more than 200 characters, or with a control or bidirectional formatting character', () => {
    for (const name of ['x'.repeat(201), 'a\u0007b', 'a\u202eb', 'a\u061cb', 'a\u2069b'])
      expect(refusal(() => checkKeyName(name))).toEqual({
        field: 'name',
        cli: '--name must be at most 200 characters with no control or bidirectional formatting characters',
        console: 'name: must be a string of at most 200 characters, with no control or bidirectional formatting characters',
      })
    expect(checkKeyName('x'.repeat(200))).toBe('x'.repeat(200))
  })

  test('the enterprise ceiling is allowed; plans give their own limits', () => {
    expect(limitsFor({ plan: 'enterprise', rpm: CUSTOM_LIMIT.max, rpd: CUSTOM_LIMIT.max })).toEqual({ rpm: 1e9, rpd: 1e9 })
    expect(limitsFor({ plan: 'pro' })).toEqual({ rpm: 300, rpd: 10_000 })
  })
})
