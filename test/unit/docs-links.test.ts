/**
 * The user's guide is README.md plus the pages in docs/ it links: every relative link in them names a
 * file that exists, and every #anchor a heading of that file (GitHub's slugs), so a page moved or a
 * heading renamed cannot leave a reader at a dead end.
 */
import { describe, expect, test } from 'bun:test'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'

const ROOT = resolve(import.meta.dir, '../..')
const PAGES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
]

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-')
}

function anchorsOf(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/^```[\s\S]*?^```/gm, '')
  return new Set([...text.matchAll(/^#{1,6}\s+(.+)$/gm)].map((match) => slug(match[1]!)))
}

/** Links outside code blocks and code spans: `[text](target)`, targets without a scheme. */
function linksOf(file: string): string[] {
  const text = readFileSync(file, 'utf8')
    .replace(/^```[\s\S]*?^```/gm, '')
    .replace(/`[^`\n]*`/g, (code) => (code.includes('](') ? '' : code))
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1]!).filter((target) => !/^[a-z]+:/i.test(target))
}

describe('the guide links only to what exists', () => {
  test('checks something: the pages hold links and a broken one is caught', () => {
    expect(PAGES.length).toBeGreaterThan(3)
    expect(slug('Who may read `/metrics`?')).toBe('who-may-read-metrics')
    expect(linksOf(join(ROOT, 'README.md')).length).toBeGreaterThan(10)
  })

  for (const page of PAGES) {
    test(page, () => {
      const file = join(ROOT, page)
      const broken: string[] = []
      for (const link of linksOf(file)) {
        const [path, anchor] = link.split('#') as [string, string | undefined]
        const target = path ? resolve(dirname(file), decodeURIComponent(path)) : file
        if (!existsSync(target)) broken.push(`${link}: no ${relative(ROOT, target)}`)
        else if (anchor && target.endsWith('.md') && !anchorsOf(target).has(anchor)) broken.push(`${link}: no heading #${anchor}`)
      }
      expect(broken).toEqual([])
    })
  }
})
