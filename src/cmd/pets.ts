/** `petstore pets seed|reset`: sample pets for staging and test stores, or none at all; keys are kept. */
import { parseInteger } from '../config'
import type { NewPet } from '../domain/pet'
import { asUsageError, bareUsage, COMMON, help, isBare, openForCommand, parse, UsageError } from './options'

export const USAGE = `Usage: petstore pets seed --count N
       petstore pets reset --yes

  seed adds N sample pets (1 to 100000) with realistic names, categories and statuses.
  reset deletes every pet and idempotency record; API keys and their limits are kept.
  A running server sees either within a second. Meant for staging and test stores (--env staging).

${COMMON}`

export async function pets(args: string[]): Promise<number> {
  const [sub, ...rest] = args
  if (isBare(sub)) return bareUsage(sub, USAGE)
  const { values, positionals } = parse(rest, { count: { type: 'string' }, yes: { type: 'boolean' } }, USAGE)
  if (values.help) return help(USAGE)
  if (sub !== 'seed' && sub !== 'reset') throw new UsageError(`unknown pets command "${sub}"`, USAGE)
  if (positionals.length) throw new UsageError(`unexpected argument "${positionals[0]}"`, USAGE)
  if (sub === 'seed' && values.yes !== undefined) throw new UsageError('--yes does not apply to pets seed', USAGE)
  if (sub === 'reset' && values.count !== undefined) throw new UsageError('--count does not apply to pets reset', USAGE)
  if (sub === 'seed' && values.count === undefined) throw new UsageError('pets seed needs --count N', USAGE)
  const count = sub === 'seed' ? asUsageError(() => parseInteger('--count', values.count as string, 1, 100_000), USAGE) : 0
  const { storage, where } = await openForCommand(values, USAGE, { mayCreate: sub === 'seed' })
  try {
    if (sub === 'seed') {
      await storage.pets.seed(samplePets(count), Date.now())
      console.error(`petstore: added ${count} sample pets to ${where}`)
      return 0
    }
    if (values.yes !== true) {
      console.error(`petstore: pets reset deletes all ${await storage.pets.count()} pets in ${where} (keys are kept); run it again with --yes`)
      return 2
    }
    const deleted = await storage.pets.reset()
    console.error(`petstore: deleted ${deleted} pets from ${where}; API keys are kept`)
    return 0
  } finally {
    await storage.close()
  }
}

const SAMPLE_NAMES = [
  'Rex', 'Bella', 'Luna', 'Max', 'Charlie', 'Lucy', 'Cooper', 'Daisy', 'Milo', 'Bailey', 'Coco', 'Rocky',
  'Nala', 'Oliver', 'Lola', 'Tucker', 'Zoe', 'Bear', 'Ruby', 'Leo', 'Pepper', 'Simba', 'Willow', 'Ziggy',
  'Biscuit', 'Mochi', 'Pumpkin', 'Shadow', 'Ginger', 'Oscar', 'Hazel', 'Finn', 'Olive', 'Toby', 'Nova', 'Bruno',
]
/** Realistic enough to page, filter and show: a name, one of five categories, mostly available. */
function samplePets(count: number): NewPet[] {
  const statuses = ['available', 'available', 'available', 'available', 'available', 'available', 'pending', 'pending', 'sold', 'sold'] as const
  return Array.from({ length: count }, (_, i) => ({
    name: SAMPLE_NAMES[i % SAMPLE_NAMES.length]!,
    categoryId: BigInt(1 + Math.floor(Math.random() * 5)),
    status: statuses[Math.floor(Math.random() * statuses.length)]!,
  }))
}
