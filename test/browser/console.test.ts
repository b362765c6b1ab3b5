/**
 * The console's page as an operator uses it, in Debian's Chromium driven by playwright-core, over the
 * compiled binary: sign in, create a key (its secret shown once) and use it on the API, revoke it (with
 * the confirmation) and see 401 within a second, see a banned key in Bans and lift it, read the recent
 * requests and the audit log (the command line's changes among them). At 1280 and 390 pixels every
 * action of the Keys and Bans tables is on screen and clickable, and revoked keys show on request. No
 * request leaves for another origin and the page breaks no rule of its Content-Security-Policy.
 * Screenshots of each section at 1280 and 390 pixels are written to dist/console-screenshots/. Without Chromium the suite says so in one line and skips this file; with
 * CI=true it fails instead.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser, Page } from 'playwright-core'
import { cli, createKeyWithCli, eventually, type Server, startServer, tempDir } from '../support/binary'
import { launchChromium, openPage, signInAsAdmin } from '../support/browser'
import { describeWithEngines } from '../support/engines'

const SCREENSHOTS = join(import.meta.dir, '..', '..', 'dist', 'console-screenshots')

let browser: Browser
let server: Server
let consoleOrigin: string
let password: string

const openConsole = (width: number, origin = consoleOrigin) => openPage(browser, width, origin)
const signIn = (page: Page, operatorPassword = password) => signInAsAdmin(page, operatorPassword)

describeWithEngines(['chromium'], 'the console page in a browser', () => {
  beforeAll(async () => {
    browser = await launchChromium()
    server = await startServer({ console: true, args: ['--ban-after', '1'] })
    consoleOrigin = `http://127.0.0.1:${/, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(server.stderr())![1]}`
    password = readFileSync(/its password is in (\S+) \(readable/.exec(server.stderr())![1]!, 'utf8').trim()
    mkdirSync(SCREENSHOTS, { recursive: true })
  }, 60_000)

  afterAll(async () => {
    await browser.close()
    await server.stop()
  })

  test('sign in; create a key and use it; revoke it and see 401 within a second; lift a ban and see 200; screenshots at both widths', async () => {
    const { page, foreign, messages } = await openConsole(1280)
    try {
      // Signed out: the page shows the sign-in form and nothing else.
      await page.locator('#sign-in').waitFor()
      expect(await page.locator('#signed-in').isHidden()).toBe(true)
      // A first-time operator is told where the first password is, never the password.
      const hint = await page.locator('#sign-in .first-sign-in').innerText()
      expect(hint).toContain('petstore-console-password.txt')
      expect(hint).not.toContain(password)
      await page.screenshot({ path: join(SCREENSHOTS, 'sign-in-1280.png'), fullPage: true })
      await signIn(page)
      expect(await page.locator('#who').innerText()).toBe('Signed in as admin')
      expect(await page.locator('#sign-in').isVisible()).toBe(false)

      // Create a key: its secret is shown once, and works on the API.
      await page.locator('[data-tab=keys]').click()
      await page.locator('#create-key input[name=name]').fill('browser key')
      await page.locator('#create-key select[name=plan]').selectOption('enterprise')
      await page.locator('#create-key input[name=rpm]').fill('2')
      await page.locator('#create-key input[name=rpd]').fill('100')
      await page.locator('#create-key button[type=submit]').click()
      await page.locator('#secret').waitFor()
      const secret = await page.locator('#secret-value').innerText()
      expect(secret).toMatch(/^psk_/)
      expect(await page.locator('#secret-note').innerText()).toStartWith('The secret of the new key browser key, shown only now')
      const row = page.locator('#key-table tbody tr', { hasText: 'browser key' })
      await row.waitFor()
      expect(await row.locator('td').nth(2).innerText()).toBe('2 / 100')
      expect(await row.locator('td').nth(6).innerText()).toBe('100')
      expect((await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })).status).toBe(200)

      // Push it into 429s and a ban (--ban-after 1), then find it in Bans and lift it.
      const statuses: number[] = []
      for (let i = 0; i < 4; i++)
        statuses.push((await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })).status)
      expect(statuses).toEqual([200, 429, 429, 429])
      await page.locator('[data-tab=bans]').click()
      const ban = page.locator('#ban-table tbody tr', { hasText: 'browser key' })
      await ban.waitFor()
      await page.screenshot({ path: join(SCREENSHOTS, 'bans-1280.png'), fullPage: true })
      await ban.locator('button', { hasText: 'Lift' }).click()
      // While the lift reaches every instance (a second), its button says it is busy.
      expect(await ban.locator('button', { hasText: 'Lift…' }).isDisabled()).toBe(true)
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
      // The unfiltered list, loaded with the tab, may still be drawn: wait for the filtered one.
      const refused = statuses.filter((status) => status === 429).length
      await eventually(async () => (await page.locator('#request-table tbody tr').count()) === refused, 5_000)
      expect(await page.locator('#request-table').innerText()).not.toContain(secret)
      await page.screenshot({ path: join(SCREENSHOTS, 'requests-1280.png'), fullPage: true })

      // Revoke, accepting the confirmation: 401 within a second.
      await page.locator('[data-tab=keys]').click()
      page.once('dialog', (dialog) => dialog.accept())
      await page.locator('#key-table tbody tr', { hasText: 'browser key' }).locator('button', { hasText: 'Revoke' }).click()
      const revokedAt = Date.now()
      await eventually(
        async () => (await fetch(`${server.base}/pets`, { headers: { authorization: `Bearer ${secret}` } })).status === 401,
        1_000,
      )
      expect(Date.now() - revokedAt).toBeLessThan(1_000)
      await page.locator('#key-table tbody tr', { hasText: 'browser key' }).waitFor({ state: 'detached' })
      // Its secret, on show since it was made, goes with it.
      expect(await page.locator('#secret').isHidden()).toBe(true)
      await page.screenshot({ path: join(SCREENSHOTS, 'keys-1280.png'), fullPage: true })

      // The audit log lists what was done here.
      await page.locator('[data-tab=audit]').click()
      await page.locator('#audit-table tbody tr', { hasText: 'key.revoke' }).waitFor()
      const audit = await page.locator('#audit-table').innerText()
      for (const action of ['operator.sign-in', 'key.create', 'ban.lift', 'key.revoke']) expect(audit).toContain(action)
      await page.screenshot({ path: join(SCREENSHOTS, 'audit-1280.png'), fullPage: true })

      // A secret on show when its operator signs out is not shown to whoever signs in next in the tab.
      await page.locator('[data-tab=keys]').click()
      await page.locator('#create-key input[name=name]').fill('left on screen')
      await page.locator('#create-key button[type=submit]').click()
      await page.locator('#secret').waitFor()
      await page.locator('#sign-out').click()
      await page.locator('#sign-in').waitFor()
      await signIn(page)
      await page.locator('[data-tab=keys]').click()
      await page.locator('#key-table tbody tr', { hasText: 'left on screen' }).waitFor()
      expect([await page.locator('#secret').isHidden(), await page.locator('#secret-value').textContent()]).toEqual([true, ''])

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
      for (const tab of ['overview', 'keys', 'deprecation', 'bans', 'requests', 'audit']) {
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

  test("usage: known traffic from two keys shows exactly its counts in the keys table, the key's chart and the deprecation page, also after a restart; screenshots at both widths", async () => {
    const dataFile = join(tempDir(), 'petstore.db')
    // Made before the start, so that no request is needed to wait for the server to know them.
    const limited = createKeyWithCli(dataFile, ['--plan', 'enterprise', '--rpm', '3', '--rpd', '1000', '--name', 'limited'])
    const caller = createKeyWithCli(dataFile, ['--plan', 'pro', '--name', 'caller'])
    const args = ['--ban-after', '1', '--no-access-log']
    let usageServer = await startServer({ console: true, dataFile, args })
    const origin = () => `http://127.0.0.1:${/, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(usageServer.stderr())![1]}`
    const operatorPassword = readFileSync(/its password is in (\S+) \(readable/.exec(usageServer.stderr())![1]!, 'utf8').trim()
    const headers = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })
    try {
      // "limited": 3 a minute, then refused and banned (--ban-after 1): 3 answered, 4 refused.
      const statuses: number[] = []
      for (let i = 0; i < 7; i++) statuses.push((await fetch(`${usageServer.base}/pets`, { headers: headers(limited) })).status)
      expect(statuses).toEqual([200, 200, 200, 429, 429, 429, 429])
      // "caller": adds a pet, then calls the deprecated getPet 5 times.
      const pet = await fetch(`${usageServer.base}/pets`, {
        method: 'POST',
        headers: headers(caller),
        body: JSON.stringify({ name: 'Rex', categoryId: 1, status: 'available' }),
      })
      expect(pet.status).toBe(201)
      const { id } = (await pet.json()) as { id: number }
      const GET_PET_CALLS = 5
      let sunset = Number.NaN
      for (let i = 0; i < GET_PET_CALLS; i++) {
        const answer = await fetch(`${usageServer.base}/pets/${id}`, { headers: headers(caller) })
        expect(answer.status).toBe(200)
        sunset = Date.parse(answer.headers.get('sunset')!)
      }
      expect(new Date(sunset).toISOString()).toBe('2030-12-05T00:00:00.000Z')

      const expectCounts = async (page: Page, width: number, shots: boolean, sameProcess: boolean) => {
        const shot = (name: string) =>
          shots ? page.screenshot({ path: join(SCREENSHOTS, `${name}-${width}.png`), fullPage: true }) : undefined
        const fits = async () => expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(width)
        // The overview: every request of both keys, the ban, two active keys.
        await page.locator('[data-tab=overview]').click()
        await page.locator('#overview-caption', { hasText: 'over the last hour' }).waitFor()
        const overview = await page.locator('#overview-figures').innerText()
        const figure = (text: string, label: string) => new RegExp(`(^|\\n)${label}\\n([^\\n]+)`).exec(text)?.[2]
        expect(figure(overview, 'Requests')).toBe(String(7 + 1 + GET_PET_CALLS))
        // The ban is the limiter's, in this process's memory (SQLite mode): not there after a restart.
        if (sameProcess) expect(figure(overview, 'Bans now')).toBe('1')
        expect(figure(overview, 'Active keys today')).toBe('2')
        expect(figure(overview, '429')).toBe('4')
        expect(await page.locator('#overview-chart canvas').count()).toBeGreaterThan(0)
        await fits()
        await shot('overview')
        // The keys table: requests and 429s today, getPet calls.
        await page.locator('[data-tab=keys]').click()
        const cells = async (name: string) => {
          const row = page.locator('#key-table tbody tr', {
            has: page.locator('td:first-child button', { hasText: new RegExp(`^${name}$`) }),
          })
          return (await row.locator('td').allInnerTexts()).slice(3, 6)
        }
        await page.locator('#key-table tbody tr', { hasText: 'caller' }).waitFor()
        expect(await cells('limited')).toEqual(['7', '4', '0'])
        expect(await cells('caller')).toEqual([String(1 + GET_PET_CALLS), '0', String(GET_PET_CALLS)])
        // Searching by name, and sorting by 429s.
        await page.locator('#key-search').fill('lim')
        expect(await page.locator('#key-table tbody tr').count()).toBe(1)
        await page.locator('#key-search').fill('')
        await page.locator('[data-sort=limitedToday]').click()
        await page.locator('[data-sort=limitedToday]').click()
        expect(await page.locator('#key-table tbody tr td:first-child button').first().innerText()).toBe('limited')
        await fits()
        await shot('keys-usage')
        // The key: its chart's lines and what they sum to, its refusals.
        await page.locator('#key-table tbody tr td:first-child button', { hasText: 'limited' }).click()
        await page.locator('#key-caption', { hasText: 'in all' }).waitFor()
        // It opens on the last hour, as the overview does: recent traffic is not a sliver at the edge.
        expect(await page.locator('#key-caption').innerText()).toStartWith(
          'Requests per minute over the last hour: 7 in all, 3 2xx, 0 4xx (not 429), 4 429, 0 501, 0 5xx (not 501).',
        )
        expect(await page.locator('#key-chart .u-legend th').allInnerTexts()).toEqual([
          'Time',
          '2xx',
          '4xx (not 429)',
          '429',
          '501',
          '5xx (not 501)',
        ])
        const keyFigures = await page.locator('#key-figures').innerText()
        expect(figure(keyFigures, 'Requests today')).toBe('7')
        expect(figure(keyFigures, '429s today')).toBe('4')
        // A key without an expiry: never, and what that means.
        expect(keyFigures).toMatch(/(^|\n)Expires\nnever\nit works until it is revoked/)
        await fits()
        await shot('key')
        await page.locator('[data-key-window=day]').click()
        await page.locator('#key-caption', { hasText: 'over the last day: 7 in all' }).waitFor()
        return page
      }

      const look = async (width: number, shots: boolean, withRefusals: boolean) => {
        const { page, foreign, messages } = await openConsole(width, origin())
        try {
          await signIn(page, operatorPassword)
          // Counts are written every 2 s: wait until both keys' are there.
          await eventually(async () => {
            const { keys } = (await page.evaluate(() => fetch('/api/keys').then((r) => r.json()))) as { keys: { requestsToday: number }[] }
            const counts = keys.map((k: { requestsToday: number }) => k.requestsToday).filter((count: number) => count > 0)
            return counts.sort().join() === `${1 + GET_PET_CALLS},7`
          }, 15_000)
          // Drawn again from now on (the sections drawn at sign-in may predate the counts).
          await page.reload()
          await page.locator('#who').waitFor()
          await expectCounts(page, width, shots, withRefusals)
          if (shots) {
            // The system's dark scheme: the page and the chart's colours follow it.
            await page.emulateMedia({ colorScheme: 'dark' })
            await page.screenshot({ path: join(SCREENSHOTS, `key-dark-${width}.png`), fullPage: true })
            await page.locator('[data-tab=overview]').click()
            await page.locator('#overview-chart canvas').first().waitFor()
            await page.screenshot({ path: join(SCREENSHOTS, `overview-dark-${width}.png`), fullPage: true })
            await page.emulateMedia({ colorScheme: 'light' })
          }
          if (withRefusals) expect(await page.locator('#refusal-table tbody tr').allInnerTexts()).toHaveLength(4)
          for (const refusal of withRefusals ? await page.locator('#refusal-table tbody tr td:nth-child(4)').allInnerTexts() : [])
            expect(refusal).toBe('429')
          // Deprecation: the caller, its calls, the days left until the Sunset header's date.
          await page.locator('[data-tab=deprecation]').click()
          const row = page.locator('#deprecation-table tbody tr', { hasText: 'caller' })
          await row.waitFor()
          expect((await row.locator('td').allInnerTexts()).slice(0, 3)).toEqual(['caller', String(GET_PET_CALLS), String(GET_PET_CALLS)])
          expect(await page.locator('#deprecation-table tbody tr').count()).toBe(1)
          const days = Math.ceil((sunset - Date.now()) / 86_400_000)
          expect(await page.locator('#sunset-note').innerText()).toContain(`is removed on December 5, 2030: ${days} days left`)
          expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(width)
          if (shots) await page.screenshot({ path: join(SCREENSHOTS, `deprecation-${width}.png`), fullPage: true })
          expect(foreign).toEqual([])
          expect(messages.filter((message) => /Content Security Policy|Refused|error/i.test(message))).toEqual([])
        } finally {
          await page.close()
        }
      }
      await look(1280, true, true)
      await look(390, true, true)

      // A restart: the same counts, read from the data file (the recent refusals were this process's).
      expect(await usageServer.stop()).toBe(0)
      usageServer = await startServer({ console: true, dataFile, args })
      await look(1280, false, false)
    } finally {
      await usageServer.stop()
    }
  }, 120_000)

  test("at 390 pixels every action of the Keys and Bans tables is on screen and clickable; revoked keys on request; the command line's changes in the audit view; screenshots at both widths", async () => {
    const shots = join(SCREENSHOTS, 'operator')
    mkdirSync(shots, { recursive: true })
    const opsServer = await startServer({ console: true, args: ['--ban-after', '1', '--no-access-log'] })
    const origin = `http://127.0.0.1:${/, console at http:\/\/127\.0\.0\.1:(\d+)\//.exec(opsServer.stderr())![1]}`
    const operatorPassword = readFileSync(/its password is in (\S+) \(readable/.exec(opsServer.stderr())![1]!, 'utf8').trim()
    const data = ['--data', opsServer.dataFile]
    try {
      // Keys made, banned and revoked with the command line, and a 501 in the overview.
      const noisy = createKeyWithCli(opsServer.dataFile, ['--plan', 'enterprise', '--rpm', '1', '--rpd', '100', '--name', 'noisy client'])
      createKeyWithCli(opsServer.dataFile, ['--plan', 'pro', '--name', 'mobile app'])
      createKeyWithCli(opsServer.dataFile, ['--plan', 'business', '--name', 'partner integration with a long name'])
      createKeyWithCli(opsServer.dataFile, ['--plan', 'free', '--name', 'old laptop'])
      const keys = JSON.parse(cli(['keys', 'list', '--json', ...data]).stdout) as { id: string; name: string }[]
      const gone = keys.find((key) => key.name === 'old laptop')!.id
      expect(cli(['keys', 'revoke', gone, ...data]).code).toBe(0)
      // One a minute: the first 429 names the wait; with --ban-after 1 the second sent before it starts the ban.
      const statuses: number[] = []
      for (let i = 0; i < 4; i++)
        statuses.push((await fetch(`${opsServer.base}/store/orders`, { headers: { authorization: `Bearer ${noisy}` } })).status)
      expect(statuses).toEqual([501, 429, 429, 429])

      for (const width of [1280, 390]) {
        const { page, messages } = await openConsole(width, origin)
        try {
          await signIn(page, operatorPassword)
          const shot = (name: string) => page.screenshot({ path: join(shots, `${name}-${width}.png`), fullPage: true })
          const fits = async () => expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(width)
          /** Every button of a table's rows: inside the viewport from left to right, and the topmost element at its centre. */
          const everyActionReachable = async (table: string, expected: number) => {
            const buttons = page.locator(`${table} tbody tr td:last-child button`)
            expect(await buttons.count()).toBe(expected)
            for (const button of await buttons.all()) {
              const box = (await button.boundingBox())!
              expect({ label: await button.innerText(), left: box.x >= 0, right: box.x + box.width <= width }).toEqual({
                label: await button.innerText(),
                left: true,
                right: true,
              })
              await button.scrollIntoViewIfNeeded()
              // Nothing covers it: a click there reaches the button (trial: every check of a click, without it).
              await button.click({ trial: true, timeout: 2_000 })
            }
          }

          await page.locator('#overview-caption', { hasText: 'over the last hour' }).waitFor()
          await fits()
          await shot('overview')

          // Keys: the revoked key only on request, for the record, with no action.
          await page.locator('[data-tab=keys]').click()
          await page.locator('#key-table tbody tr', { hasText: 'mobile app' }).waitFor()
          expect(await page.locator('#key-table tbody tr', { hasText: 'old laptop' }).count()).toBe(0)
          await everyActionReachable('#key-table', 4 * 5)
          if (width === 1280) {
            // At desktop width a key's five actions sit on two lines at most: the lines each row's buttons take.
            const lines = await page
              .locator('#key-table tbody tr')
              .evaluateAll((rows) =>
                rows.map(
                  (row) =>
                    new Set([...row.querySelectorAll('td:last-child button')].map((b) => Math.round(b.getBoundingClientRect().top))).size,
                ),
              )
            expect(lines).toEqual([2, 2, 2, 2])
          }
          await page.locator('#key-revoked').check()
          const revoked = page.locator('#key-table tbody tr', { hasText: 'old laptop' })
          await revoked.waitFor()
          expect(await revoked.locator('td:last-child').innerText()).toStartWith('Revoked ')
          await everyActionReachable('#key-table', 4 * 5)
          await fits()
          if (width === 1280) {
            // The keys table fits without scrolling sideways, dates and a ban included.
            const overflow = await page
              .locator('#key-table')
              .evaluate((table) => table.parentElement!.scrollWidth - table.parentElement!.clientWidth)
            expect(overflow).toBeLessThanOrEqual(0)
          }
          await shot('keys')
          await page.locator('#key-revoked').uncheck()
          await revoked.waitFor({ state: 'detached' })

          // Bans: the noisy key, its Lift on screen; lifted with a click.
          await page.locator('[data-tab=bans]').click()
          await page.locator('#ban-table tbody tr', { hasText: 'noisy client' }).waitFor()
          await everyActionReachable('#ban-table', 1)
          await fits()
          await shot('bans')
          if (width === 390) {
            await page.locator('#ban-table tbody tr', { hasText: 'noisy client' }).locator('button', { hasText: 'Lift' }).click()
            await page.locator('#ban-table tbody tr', { hasText: 'No bans right now.' }).waitFor()
          }

          // Audit: the command line's changes, as cli (USER).
          await page.locator('[data-tab=audit]').click()
          const byCli = page.locator('#audit-table tbody tr', { hasText: 'key.revoke' })
          await byCli.waitFor()
          expect((await byCli.locator('td').allInnerTexts()).slice(1)).toEqual([
            `cli (${Bun.spawnSync(['id', '-un']).stdout.toString().trim()})`,
            'key.revoke',
            gone,
          ])
          await fits()
          await shot('audit')
          expect(messages.filter((message) => /Content Security Policy|Refused/.test(message))).toEqual([])
        } finally {
          await page.close()
        }
      }
    } finally {
      await opsServer.stop()
    }
  }, 120_000)

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
