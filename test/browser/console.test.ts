/**
 * The console's page as an operator uses it, in Debian's Chromium driven by playwright-core, over the
 * compiled binary: sign in, create a key (its secret shown once) and use it on the API, revoke it (with
 * the confirmation) and see 401 within a second, see a banned key in Bans and lift it, read the recent
 * requests and the audit log. No request leaves for another origin and the page breaks no rule of its
 * Content-Security-Policy. Screenshots of each section at 1280 and 390 pixels are written to
 * dist/console-screenshots/. Without Chromium the suite says so in one line and skips this file; with
 * CI=true it fails instead.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { type Browser, chromium, type Page } from 'playwright-core'
import { eventually, type Server, startServer } from '../support/binary'

const CHROMIUM = '/usr/bin/chromium'
const available = existsSync(CHROMIUM)
if (!available) {
  if (process.env.CI === 'true') throw new Error(`${CHROMIUM} is missing: CI must install Debian's chromium package`)
  console.warn('browser tests skipped: no /usr/bin/chromium (apt-get install -y chromium)')
}
const SCREENSHOTS = join(import.meta.dir, '..', '..', 'dist', 'console-screenshots')

let browser: Browser
let server: Server
let consoleOrigin: string
let password: string

beforeAll(async () => {
  if (!available) return
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  server = await startServer({ args: ['--ban-after', '1'] })
  consoleOrigin = `http://127.0.0.1:${/, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(server.stderr())![1]}`
  password = readFileSync(/its password is in (\S+) \(readable/.exec(server.stderr())![1]!, 'utf8').trim()
  mkdirSync(SCREENSHOTS, { recursive: true })
}, 60_000)

afterAll(async () => {
  if (!available) return
  await browser.close()
  await server.stop()
})

/** A page that records every request to another origin and every message of the console (CSP reports). */
async function openConsole(width: number): Promise<{ page: Page; foreign: string[]; messages: string[] }> {
  const page = await browser.newPage({ viewport: { width, height: 900 } })
  const foreign: string[] = []
  const messages: string[] = []
  page.on('request', (request) => {
    if (!request.url().startsWith(consoleOrigin)) foreign.push(request.url())
  })
  page.on('console', (message) => messages.push(message.text()))
  page.on('pageerror', (error) => messages.push(error.message))
  await page.goto(`${consoleOrigin}/`)
  return { page, foreign, messages }
}

async function signIn(page: Page): Promise<void> {
  await page.locator('#sign-in input[name=name]').fill('admin')
  await page.locator('#sign-in input[name=password]').fill(password)
  await page.locator('#sign-in button[type=submit]').click()
  await page.locator('#who').waitFor()
}

describe.skipIf(!available)('the console page in a browser', () => {
  test('sign in; create a key and use it; revoke it and see 401 within a second; lift a ban and see 200; screenshots at both widths', async () => {
    const { page, foreign, messages } = await openConsole(1280)
    try {
      // Signed out: the page shows the sign-in form and nothing else.
      await page.locator('#sign-in').waitFor()
      expect(await page.locator('#signed-in').isHidden()).toBe(true)
      await page.screenshot({ path: join(SCREENSHOTS, 'sign-in-1280.png'), fullPage: true })
      await signIn(page)
      expect(await page.locator('#who').innerText()).toBe('Signed in as admin')
      expect(await page.locator('#sign-in').isVisible()).toBe(false)

      // Create a key: its secret is shown once, and works on the API.
      await page.locator('#create-key input[name=name]').fill('browser key')
      await page.locator('#create-key select[name=plan]').selectOption('enterprise')
      await page.locator('#create-key input[name=rpm]').fill('2')
      await page.locator('#create-key input[name=rpd]').fill('100')
      await page.locator('#create-key button[type=submit]').click()
      await page.locator('#secret').waitFor()
      const secret = await page.locator('#secret-value').innerText()
      expect(secret).toMatch(/^psk_/)
      const row = page.locator('#key-table tbody tr', { hasText: 'browser key' })
      await row.waitFor()
      expect(await row.locator('td').nth(3).innerText()).toBe('2 / 100')
      expect(await row.locator('td').nth(4).innerText()).toBe('100')
      expect((await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })).status).toBe(200)

      // Push it into 429s and a ban (--ban-after 1), then find it in Bans and lift it.
      const statuses: number[] = []
      for (let i = 0; i < 4; i++) statuses.push((await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })).status)
      expect(statuses).toEqual([200, 429, 429, 429])
      await page.locator('[data-tab=bans]').click()
      const ban = page.locator('#ban-table tbody tr', { hasText: 'browser key' })
      await ban.waitFor()
      await page.screenshot({ path: join(SCREENSHOTS, 'bans-1280.png'), fullPage: true })
      await ban.locator('button', { hasText: 'Lift' }).click()
      await page.locator('#ban-table tbody tr', { hasText: 'No bans right now.' }).waitFor()
      // Until the lift applies (within a second), requests are still refused: they are counted too.
      await eventually(async () => {
        statuses.push((await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })).status)
        return statuses.at(-1) === 200
      }, 1_000)

      // Recent requests, filtered by the key and by 429.
      await page.locator('[data-tab=requests]').click()
      await page.locator('#request-filter input[name=status]').fill('429')
      await page.locator('#request-filter button[type=submit]').click()
      await page.locator('#request-table tbody tr', { hasText: 'browser key' }).first().waitFor()
      expect(await page.locator('#request-table tbody tr').count()).toBe(statuses.filter((status) => status === 429).length)
      expect(await page.locator('#request-table').innerText()).not.toContain(secret)
      await page.screenshot({ path: join(SCREENSHOTS, 'requests-1280.png'), fullPage: true })

      // Revoke, accepting the confirmation: 401 within a second.
      await page.locator('[data-tab=keys]').click()
      page.once('dialog', (dialog) => dialog.accept())
      await page.locator('#key-table tbody tr', { hasText: 'browser key' }).locator('button', { hasText: 'Revoke' }).click()
      const revokedAt = Date.now()
      await eventually(async () => (await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })).status === 401, 1_000)
      expect(Date.now() - revokedAt).toBeLessThan(1_000)
      await page.locator('#key-table tbody tr', { hasText: 'browser key' }).waitFor({ state: 'detached' })
      await page.screenshot({ path: join(SCREENSHOTS, 'keys-1280.png'), fullPage: true })

      // The audit log lists what was done here.
      await page.locator('[data-tab=audit]').click()
      await page.locator('#audit-table tbody tr', { hasText: 'key.revoke' }).waitFor()
      const audit = await page.locator('#audit-table').innerText()
      for (const action of ['operator.sign-in', 'key.create', 'ban.lift', 'key.revoke']) expect(audit).toContain(action)
      await page.screenshot({ path: join(SCREENSHOTS, 'audit-1280.png'), fullPage: true })

      expect(foreign).toEqual([])
      expect(messages.filter((message) => /Content Security Policy|Refused/.test(message))).toEqual([])
      expect(messages.filter((message) => /error/i.test(message) && !/401|Unauthorized/.test(message))).toEqual([])
    } finally {
      await page.close()
    }
  }, 90_000)

  test('at 390 pixels wide every section is readable, and no page-wide horizontal scroll appears', async () => {
    const { page, messages } = await openConsole(390)
    try {
      await page.locator('#sign-in').waitFor()
      await page.screenshot({ path: join(SCREENSHOTS, 'sign-in-390.png'), fullPage: true })
      await signIn(page)
      expect(await page.locator('#sign-in').isVisible()).toBe(false)
      for (const tab of ['keys', 'bans', 'requests', 'audit']) {
        await page.locator(`[data-tab=${tab}]`).click()
        await page.locator(`#${tab}`).waitFor()
        expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390)
        await page.screenshot({ path: join(SCREENSHOTS, `${tab}-390.png`), fullPage: true })
      }
      expect(messages.filter((message) => /Content Security Policy|Refused/.test(message))).toEqual([])
    } finally {
      await page.close()
    }
  }, 60_000)

  test('another site cannot frame the console', async () => {
    // A page on another local origin that frames the console, as a hostile site would.
    const framing = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      fetch: () => new Response(`<iframe src="${consoleOrigin}/"></iframe>`, { headers: { 'content-type': 'text/html' } }),
    })
    const page = await browser.newPage()
    try {
      const refused: string[] = []
      page.on('requestfailed', (request) => refused.push(`${request.url()} ${request.failure()?.errorText}`))
      await page.goto(`http://127.0.0.1:${framing.port}/`)
      await eventually(() => refused.length > 0 || page.frames().some((frame) => frame.url().startsWith(consoleOrigin)), 5_000)
      expect(refused).toEqual([`${consoleOrigin}/ net::ERR_BLOCKED_BY_RESPONSE`])
      expect(page.frames().some((frame) => frame.url().startsWith(consoleOrigin))).toBe(false)
    } finally {
      await page.close()
      framing.stop(true)
    }
  }, 30_000)
})
