/**
 * A key's lifecycle in the console's page, in Debian's Chromium over the compiled binary, at 1280 and 390
 * pixels: roll a key's secret (the new one shown once, with Copy; both work on the API), set its expiry
 * (marked as within 7 days), and change its plan in the page's own form (an enterprise plan with only
 * the per-minute box filled is refused naming rpm). Screenshots go to dist/console-screenshots/lifecycle/.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser } from 'playwright-core'
import { createKeyWithCli, type Server, startServer } from '../support/binary'
import { launchChromium, openPage, signInAsAdmin } from '../support/browser'
import { describeWithEngines } from '../support/engines'

const SCREENSHOTS = join(import.meta.dir, '..', '..', 'dist', 'console-screenshots', 'lifecycle')

describeWithEngines(['chromium'], "a key's lifecycle in the console page", () => {
  let browser: Browser
  let server: Server
  let origin: string
  let password: string

  beforeAll(async () => {
    browser = await launchChromium()
    server = await startServer({ console: true, args: ['--no-access-log'] })
    origin = `http://127.0.0.1:${/, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(server.stderr())![1]}`
    password = readFileSync(/its password is in (\S+) \(readable/.exec(server.stderr())![1]!, 'utf8').trim()
    mkdirSync(SCREENSHOTS, { recursive: true })
  }, 60_000)
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
  })

  const status = async (secret: string) =>
    (await fetch(`${server.base}/pets?limit=1`, { headers: { authorization: `Bearer ${secret}` } })).status

  for (const width of [1280, 390])
    test(`at ${width} px: roll a secret, set an expiry, change a plan in the page's form`, async () => {
      const name = `lifecycle ${width}`
      const first = createKeyWithCli(server.dataFile, ['--plan', 'pro', '--name', name])
      expect(await status(first)).toBe(200)
      const { page, foreign, messages } = await openPage(browser, width, origin)
      const shot = (what: string) => page.screenshot({ path: join(SCREENSHOTS, `${what}-${width}.png`), fullPage: true })
      try {
        await signInAsAdmin(page, password)
        await page.locator('[data-tab=keys]').click()
        const row = page.locator('#key-table tbody tr', { hasText: name })
        await row.waitFor()
        expect(await row.locator('td').nth(9).innerText()).toBe('never')

        // Roll, with an hour's overlap: the new secret once, with Copy; both secrets work.
        await row.locator('button', { hasText: 'Roll secret' }).click()
        const roll = page.locator('#roll-dialog')
        await roll.waitFor()
        await roll.locator('select[name=overlap]').selectOption('3600')
        await shot('roll-dialog')
        await roll.locator('button[type=submit]').click()
        await page.locator('#secret').waitFor()
        await roll.waitFor({ state: 'hidden' })
        const second = await page.locator('#secret-value').innerText()
        expect(second).toMatch(/^psk_[0-9A-Za-z]{49}$/)
        expect(await page.locator('#secret-note').innerText()).toContain('The previous secret works until')
        expect(await page.locator('#copy-secret').isVisible()).toBe(true)
        expect([await status(first), await status(second)]).toEqual([200, 200])
        await shot('rolled')

        // Set an expiry three days on: the table marks it.
        await row.getByRole('button', { name: 'Expiry', exact: true }).click()
        const expiry = page.locator('#expiry-dialog')
        await expiry.waitFor()
        expect(await expiry.locator('input[name=never]').isChecked()).toBe(true)
        await expiry.locator('input[name=never]').uncheck()
        const inThreeDays = await page.evaluate(() => {
          const at = new Date(Date.now() + 3 * 86_400_000)
          return new Date(at.getTime() - at.getTimezoneOffset() * 60_000).toISOString().slice(0, 16)
        })
        await expiry.locator('input[name=at]').fill(inThreeDays)
        await shot('expiry-dialog')
        await expiry.locator('button[type=submit]').click()
        await expiry.waitFor({ state: 'hidden' })
        await page.locator('#key-table tbody tr', { hasText: '(within 7 days)' }).filter({ hasText: name }).waitFor()
        await shot('expiring')

        // Change plan in the page's form: the limit boxes start empty; enterprise with only per-minute is refused naming rpm.
        await row.getByRole('button', { name: 'Plan', exact: true }).click()
        const plan = page.locator('#plan-dialog')
        await plan.waitFor()
        expect(await plan.locator('select[name=plan]').inputValue()).toBe('pro')
        expect([await plan.locator('input[name=rpm]').inputValue(), await plan.locator('input[name=rpd]').inputValue()]).toEqual(['', ''])
        await plan.locator('select[name=plan]').selectOption('enterprise')
        await plan.locator('input[name=rpm]').fill('120')
        await plan.locator('button[type=submit]').click()
        await plan.locator('.error', { hasText: 'rpm: an enterprise key needs rpm and rpd' }).waitFor()
        await shot('plan-refused')
        await plan.locator('input[name=rpd]').fill('5000')
        await plan.locator('button[type=submit]').click()
        await plan.waitFor({ state: 'hidden' })
        await row.locator('td', { hasText: '120 / 5000' }).waitFor()
        await shot('keys')
        expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(width)
        expect(foreign).toEqual([])
        expect(messages.filter((message) => /Content Security Policy|Refused/.test(message))).toEqual([])
      } finally {
        await page.close()
      }
    }, 60_000)
})
