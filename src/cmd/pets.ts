/** `petstore pets seed|reset`: sample pets for staging and test stores, or none at all; keys are kept. */
import { integer, option, reader, toggle, flagLines } from '../flags/table'
import type { NewPet, PetStatus } from '../domain/pet'
import { asUsageError, COMMON, parseSub, UsageError, withStorage } from './options'

/** How many pets one seed adds. */
const SEED = { min: 1, max: 100_000 }

const FLAGS = {
  count: option({ flag: 'count', value: 'N', help: 'how many pets seed adds', parse: integer(SEED), only: ['seed'] }),
  yes: toggle({ flag: 'yes', help: 'reset deletes them; without it, reset says how many it would delete', only: ['reset'] }),
}

export const USAGE = `Usage: petstore pets seed --count N
       petstore pets reset --yes

  seed adds N sample pets (${SEED.min} to ${SEED.max}) with realistic names, categories and statuses.
  reset deletes every pet and idempotency record; API keys and their limits are kept.
  A running server sees either within a second. Meant for staging and test stores (--env staging).

${flagLines(FLAGS)}
${COMMON}`

export async function pets(args: string[]): Promise<number> {
  const line = parseSub(args, FLAGS, USAGE, 'pets', ['seed', 'reset'])
  if (typeof line === 'number') return line
  const { sub, values, positionals } = line
  if (positionals.length) throw new UsageError(`unexpected argument "${positionals[0]}"`, USAGE)
  if (sub === 'seed' && values.count === undefined) throw new UsageError('pets seed needs --count N', USAGE)
  const count = sub === 'seed' ? asUsageError(() => reader(FLAGS, values, process.env).value('count')!, USAGE) : 0
  return withStorage(values, USAGE, { mayCreate: sub === 'seed' }, async (storage, where) => {
    if (sub === 'seed') {
      await storage.pets.seed(samplePets(count), Date.now())
      console.error(`petstore: added ${petCount(count, 'sample pet')} to ${where}`)
      return 0
    }
    if (values.yes !== true) {
      const stored = await storage.pets.count()
      console.error(
        `petstore: pets reset deletes ${stored === 1 ? 'the 1 pet' : `all ${stored} pets`} in ${where} (keys are kept); run it again with --yes`,
      )
      return 2
    }
    const deleted = await storage.pets.reset()
    console.error(`petstore: deleted ${petCount(deleted, 'pet')} from ${where}; API keys are kept`)
    return 0
  })
}

/** `1 pet`, `2 pets`. */
function petCount(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`
}

/** Names given in turn. */
const SAMPLE_NAMES = `Rex Bella Luna Max Charlie Lucy Cooper Daisy Milo Bailey Coco Rocky Nala Oliver Lola Tucker Zoe Bear
  Ruby Leo Pepper Simba Willow Ziggy Biscuit Mochi Pumpkin Shadow Ginger Oscar Hazel Finn Olive Toby Nova Bruno`.split(/\s+/)

/** Realistic enough to page, filter and show: a name, one of five categories, mostly available. */
function samplePets(count: number): NewPet[] {
  return Array.from({ length: count }, (_, i) => ({
    name: SAMPLE_NAMES[i % SAMPLE_NAMES.length]!,
    categoryId: BigInt(1 + Math.floor(Math.random() * 5)),
    status: sampleStatus(Math.random()),
  }))
}

/** Six in ten available, two pending, two sold. */
function sampleStatus(draw: number): PetStatus {
  return draw < 0.6 ? 'available' : draw < 0.8 ? 'pending' : 'sold'
}
