/**
 * The /docs page as a person uses it, in Debian's Chromium driven by playwright-core: opened at
 * 127.0.0.1 and at localhost, on production and on staging, it shows no error box, takes a key through
 * Authorize, and runs listPets, createPet with its prefilled example and getPet from the page; on
 * staging, a scenario picked from getPet's Prefer choice is answered.
 * Without Chromium the suite says so in one line and skips this file; with CI=true it fails instead.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync } from 'node:fs'
import { type Browser, chromium, type Page } from 'playwright-core'
import { type Server, startServer } from '../support/binary'

const CHROMIUM = '/usr/bin/chromium'
const available = existsSync(CHROMIUM)
if (!available) {
  if (process.env.CI === 'true') throw new Error(`${CHROMIUM} is missing: CI must install Debian's chromium package`)
  console.warn('browser tests skipped: no /usr/bin/chromium (apt-get install -y chromium)')
}

let browser: Browser
const servers: Server[] = []

beforeAll(async () => {
  if (!available) return
  // The closed network of these machines: no background lookups, no QUIC, no sandbox as root.
  // Playwright gives every launch a fresh, empty profile of its own.
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  })
  servers.push(await startServer(), await startServer({ args: ['--env', 'staging'] }))
}, 60_000)

afterAll(async () => {
  if (!available) return
  await browser.close()
  for (const server of servers) await server.stop()
})

/** Gives the page a key through Authorize, as a person does. */
async function authorize(page: Page, key: string): Promise<void> {
  await page.locator('.btn.authorize').first().click()
  await page.locator('.auth-container input').first().fill(key)
  await page.locator('.auth-btn-wrapper .authorize').first().click()
  await page.locator('.auth-btn-wrapper .btn-done, .close-modal').first().click()
}

/** Expands an operation, runs it with what the page prefilled, and returns the status it shows. */
async function tryItOut(page: Page, operationId: string, fill?: (block: ReturnType<Page['locator']>) => Promise<void>): Promise<string> {
  const block = page.locator(`[id$="-${operationId}"]`).first()
  await block.locator('.opblock-summary').first().click()
  await block.locator('.try-out__btn').click()
  if (fill) await fill(block)
  await block.locator('.execute').click()
  const status = block.locator('.live-responses-table .response .response-col_status').first()
  await status.waitFor({ timeout: 15_000 })
  return (await status.innerText()).trim().split(/\s/)[0]!
}

describe.skipIf(!available)('/docs in a browser', () => {
  for (const env of ['production', 'staging'] as const) {
    for (const host of ['127.0.0.1', 'localhost']) {
      test(`${env} at ${host}: no error box, and listPets, createPet (prefilled) and getPet run from the page`, async () => {
        const server = servers[env === 'production' ? 0 : 1]!
        const page = await browser.newPage()
        try {
          await page.goto(`http://${host}:${server.port}/docs`)
          await page.locator('.opblock').first().waitFor({ timeout: 15_000 })
          expect(await page.locator('.errors-wrapper').count()).toBe(0)

          await authorize(page, server.bootstrapKey!)

          expect(await tryItOut(page, 'createPet')).toBe('201')
          expect(await tryItOut(page, 'listPets')).toBe('200')
          expect(await tryItOut(page, 'getPet')).toBe('200')
          expect(await page.locator('.errors-wrapper').count()).toBe(0)
        } finally {
          await page.close()
        }
      }, 60_000)
    }
  }

  test('staging: the Prefer choice starts at -- (nothing sent), and a scenario picked from it is answered', async () => {
    const server = servers[1]!
    const page = await browser.newPage()
    try {
      await page.goto(`http://127.0.0.1:${server.port}/docs`)
      await page.locator('.opblock').first().waitFor({ timeout: 15_000 })
      await authorize(page, server.bootstrapKey!)
      const status = await tryItOut(page, 'getPet', async (block) => {
        const choice = block.locator('tr[data-param-name="Prefer"] select')
        expect(await choice.locator('option').allInnerTexts()).toEqual(['--', 'code=404', 'code=429', 'code=500', 'code=503', 'delay=2000', 'code=503, delay=2000'])
        expect(await choice.inputValue()).toBe('')
        await choice.selectOption('code=429')
      })
      expect(status).toBe('429')
    } finally {
      await page.close()
    }
  }, 60_000)
})
