/**
 * The layers of src/ point one way and no module imports itself around a ring: dependency-cruiser reads
 * the imports and applies .dependency-cruiser.cjs. A violation fails the test and is printed, one line
 * each. The same rules are first run over a small tree with wrong arrows, a ring and a file in no layer,
 * so rules that stopped matching anything (a path renamed, a pattern broken) fail here too rather than
 * pass quietly.
 */
import { expect, test } from 'bun:test'
import { join } from 'node:path'
import { cruise, type ICruiseResult } from 'dependency-cruiser'
import extractDepcruiseOptions from 'dependency-cruiser/config-utl/extract-depcruise-options'
import extractTSConfig from 'dependency-cruiser/config-utl/extract-ts-config'

const ROOT = join(import.meta.dir, '../..')
const LAYERS: Record<string, string> = require(join(ROOT, '.dependency-cruiser.cjs')).layers

async function violations(baseDir: string): Promise<{ lines: string[]; cruised: number }> {
  const options = await extractDepcruiseOptions(join(ROOT, '.dependency-cruiser.cjs'))
  const tsConfig = extractTSConfig(join(ROOT, 'tsconfig.json'))
  const result = await cruise(['src'], { ...options, baseDir }, undefined, { tsConfig })
  const { summary } = result.output as ICruiseResult
  const lines = summary.violations.map((violation) => {
    const ring = violation.cycle?.map((step) => step.name).join(' -> ')
    return `${violation.rule.name}: ${violation.from} -> ${ring ?? violation.to}`
  })
  // A file in no layer is checked by no rule, so it is a violation of its own.
  for (const { source } of (result.output as ICruiseResult).modules)
    if (source.startsWith('src/') && !Object.values(LAYERS).some((pattern) => new RegExp(pattern).test(source)))
      lines.push(`every-file-in-a-layer: ${source}`)
  return { lines, cruised: summary.totalCruised }
}

test('the rules catch wrong arrows, a ring and a file in no layer', async () => {
  const { lines } = await violations(join(ROOT, 'test/fixtures/layers'))
  expect(lines).toContain('domain-at-the-ground: src/domain/pet.ts -> src/storage/rows.ts')
  expect(lines.some((line) => line.startsWith('no-circular: src/plugins/a.ts'))).toBe(true)
  expect(lines).toContain('every-file-in-a-layer: src/stray.ts')
  expect(lines).toContain('nothing-below-reaches-the-server: src/modules/pets/service.ts -> src/server/readiness.ts')
  expect(lines).toContain('controllers-never-reach-the-gate: src/modules/pets/index.ts -> src/plugins/gate.ts')
  expect(lines).toContain('plugins-below-the-modules: src/plugins/gate.ts -> src/modules/keys/service.ts')
  expect(lines).toContain('services-never-see-http: src/modules/pets/group-commit.ts -> src/plugins/b.ts')
  // An engine's inner file from outside storage/ is refused; the same engine through its index is not.
  expect(lines).toContain('each-engine-behind-its-index: src/server/backends.ts -> src/storage/sqlite/open.ts')
  expect(lines.filter((line) => line.includes('-> src/storage/sqlite/index.ts'))).toEqual([])
}, 60_000)

test('src/ keeps its layers and has no import cycles', async () => {
  const { lines, cruised } = await violations(ROOT)
  if (lines.length > 0) console.error(`dependency-cruiser found ${lines.length} violations:\n  ${lines.join('\n  ')}`)
  expect(lines).toEqual([])
  // Every source file was read, so an empty result means clean, not that nothing was looked at.
  expect(cruised).toBeGreaterThan(50)
}, 60_000)
