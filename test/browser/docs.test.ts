/**
 * The /docs page as a person uses it, in Debian's Chromium driven by playwright-core: opened at
 * 127.0.0.1 and at localhost, on production and on staging, it shows no error box, takes a key through
 * Authorize, and runs listPets, createPet with its prefilled example and getPet from the page. Every
 * prefilled value, sent as is, gives a meaningful answer (no cursor that skips the pets); enums are
 * choices; the list's schema is Pet's; the page says where a key comes from; on staging, getPet's
 * Prefer field starts empty and a scenario typed into it is answered; on a 390-pixel phone nothing
 * scrolls sideways. Each test is one page load of the four (host × environment): a page and its load
 * cost Chromium about six seconds of CPU here, so what one load can show is shown there.
 * Without Chromium the suite says so in one line and skips this file; with CI=true it fails instead.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import type { Browser, Page } from 'playwright-core'
import { type Server, startServer } from '../support/binary'
import { launchChromium } from '../support/browser'
import { describeWithEngines } from '../support/engines'

let browser: Browser
const servers: Server[] = []

/** Opens /docs at `host` and waits for its operations, with no error box shown. */
async function open(page: Page, port: number, host = '127.0.0.1'): Promise<void> {
  await page.goto(`http://${host}:${port}/docs`)
  await page.locator('.opblock').first().waitFor({ timeout: 15_000 })
  expect(await page.locator('.errors-wrapper').count()).toBe(0)
}

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
  return statusShown(block)
}

/** Executes an operation's form again, as a person clicks Execute a second time; returns the status shown. */
async function executeAgain(block: ReturnType<Page['locator']>): Promise<string> {
  await block.locator('.btn-clear').click()
  await block.locator('.execute').click()
  return statusShown(block)
}

/** The status of the operation's last Execute, once the page shows it. */
async function statusShown(block: ReturnType<Page['locator']>): Promise<string> {
  const status = block.locator('.live-responses-table .response .response-col_status').first()
  await status.waitFor({ timeout: 15_000 })
  return (await status.innerText()).trim().split(/\s/)[0]!
}

/** The body the page shows for the operation's last Execute. */
async function shownBody(page: Page, operationId: string): Promise<string> {
  return page
    .locator(`[id$="-${operationId}"]`)
    .first()
    .locator('.live-responses-table .response-col_description .microlight')
    .first()
    .innerText()
}

describeWithEngines(['chromium'], '/docs in a browser', () => {
  beforeAll(async () => {
    browser = await launchChromium()
    servers.push(await startServer(), await startServer({ args: ['--env', 'staging'] }))
  }, 60_000)

  afterAll(async () => {
    await browser.close()
    for (const server of servers) await server.stop()
  })

  test('production at 127.0.0.1, a fresh store: every operation run with its prefilled values answers what it should, twice for createPet (the page sends no Idempotency-Key of its own); enums are choices; the page says where a key comes from', async () => {
    // A server of its own: a fresh store, so the first pet the page creates is pet 1 (getPet's example).
    const server = await startServer()
    const page = await browser.newPage()
    try {
      await open(page, server.port)
      // Where a key comes from, on the page itself and in the Authorize dialog.
      expect(await page.locator('.information-container').innerText()).toContain('petstore-bootstrap-key.txt')
      await page.locator('.btn.authorize').first().click()
      expect(await page.locator('.auth-container').first().innerText()).toContain('keys create')
      await page.locator('.close-modal').first().click()
      await authorize(page, server.bootstrapKey!)

      const rex = { name: 'Rex', categoryId: 2, status: 'available' }
      const create = page.locator('[id$="-createPet"]').first()
      expect(await tryItOut(page, 'createPet')).toBe('201')
      expect(JSON.parse(await shownBody(page, 'createPet'))).toEqual({ id: 1, ...rex })
      // The second Execute, from the same form as a person clicks it again, makes a second pet.
      expect(await executeAgain(create)).toBe('201')
      expect(JSON.parse(await shownBody(page, 'createPet'))).toEqual({ id: 2, ...rex })
      // The header stays documented, its example in the words rather than in the field.
      expect(await create.locator('tr[data-param-name="Idempotency-Key"]').innerText()).toContain('order-1234-create')
      expect(await create.locator('tr[data-param-name="Idempotency-Key"] input').inputValue()).toBe('')

      const list = page.locator('[id$="-listPets"]').first()
      expect(await tryItOut(page, 'listPets')).toBe('200')
      // status is a choice of three, none prefilled (the list is not filtered); no cursor is prefilled, so
      // the first page holds the pets just made.
      const status = list.locator('tr[data-param-name="status"] select')
      expect(await status.locator('option').allInnerTexts()).toEqual(['--', 'available', 'pending', 'sold'])
      expect(await status.inputValue()).toBe('')
      expect(await list.locator('tr[data-param-name="cursor"] input').inputValue()).toBe('')
      expect(JSON.parse(await shownBody(page, 'listPets'))).toEqual([
        { id: 1, ...rex },
        { id: 2, ...rex },
      ])
      // The list's schema is an array of Pet (Swagger UI named it array<any> when it could not see the items).
      const response200 = list.locator('tr.response[data-code="200"]').first()
      await response200.locator('button', { hasText: 'Schema' }).click()
      const schema = response200.locator('.model-box').first()
      expect(await schema.innerText()).toContain('array<object>')
      await schema.locator('article[data-json-schema-level="1"] .json-schema-2020-12-accordion').first().click()
      expect(await schema.innerText()).toMatch(/id[\s\S]*name[\s\S]*categoryId[\s\S]*status/)
      await page.locator('section.models').first().scrollIntoViewIfNeeded()
      expect(await page.locator('section.models').first().innerText()).not.toContain('array<any>')

      expect(await tryItOut(page, 'getPet')).toBe('200')
      expect(JSON.parse(await shownBody(page, 'getPet'))).toEqual({ id: 1, ...rex })
      // listOrders is documented as not implemented (501): the one operation with no 2xx to give.
      expect(await tryItOut(page, 'listOrders')).toBe('501')
      expect(await page.locator('.errors-wrapper').count()).toBe(0)
    } finally {
      await page.close()
      await server.stop()
    }
  }, 90_000)

  test('production at localhost on a 390-pixel phone: no error box, listPets, createPet and getPet run, and every operation opened and run fits the screen (nothing scrolls sideways)', async () => {
    const server = servers[0]!
    const page = await browser.newPage({ viewport: { width: 390, height: 844 } })
    try {
      await open(page, server.port, 'localhost')
      await authorize(page, server.bootstrapKey!)
      expect(await tryItOut(page, 'createPet')).toBe('201')
      expect(await tryItOut(page, 'listPets')).toBe('200')
      expect(await tryItOut(page, 'getPet')).toBe('200')
      expect(await page.locator('.errors-wrapper').count()).toBe(0)
      expect(await page.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390)
      // Each response body's Copy and Download buttons sit below its last line, not over it: the
      // text's bottom (the pre's content box, scrolled to its end) is above the buttons' top.
      const overlaps = await page.evaluate<
        number[]
      >(`[...document.querySelectorAll('.live-responses-table .highlight-code')].map((code) => {
        const pre = code.querySelector('pre')
        pre.scrollTop = pre.scrollHeight
        const textBottom = pre.getBoundingClientRect().bottom - Number.parseFloat(getComputedStyle(pre).paddingBottom)
        const buttons = [...code.querySelectorAll('.copy-to-clipboard, .download-contents')]
        return textBottom - Math.min(...buttons.map((button) => button.getBoundingClientRect().top))
      })`)
      expect(overlaps.length).toBeGreaterThan(0)
      for (const overlap of overlaps) expect(overlap).toBeLessThanOrEqual(0)
    } finally {
      await page.close()
    }
  }, 60_000)

  test('staging at 127.0.0.1: no error box, listPets and createPet run; the Prefer field starts empty (nothing sent), lists its scenarios, one typed in is answered, and emptied again getPet answers 200', async () => {
    const server = servers[1]!
    const page = await browser.newPage()
    try {
      await open(page, server.port)
      await authorize(page, server.bootstrapKey!)
      expect(await tryItOut(page, 'createPet')).toBe('201')
      expect(await tryItOut(page, 'listPets')).toBe('200')
      const status = await tryItOut(page, 'getPet', async (block) => {
        const row = block.locator('tr[data-param-name="Prefer"]')
        expect(await row.innerText()).toContain('code=404, code=429, code=500, code=503, delay=2000, code=503, delay=2000')
        const field = row.locator('input')
        expect(await field.inputValue()).toBe('')
        await field.fill('code=429')
      })
      expect(status).toBe('429')
      // Emptied again, the field sends nothing: getPet with its prefilled values is answered 200.
      const block = page.locator('[id$="-getPet"]').first()
      await block.locator('tr[data-param-name="Prefer"] input').fill('')
      expect(await executeAgain(block)).toBe('200')
      expect(await page.locator('.errors-wrapper').count()).toBe(0)
    } finally {
      await page.close()
    }
  }, 60_000)

  test('staging at localhost: no error box, and listPets, createPet (prefilled) and getPet run from the page', async () => {
    const server = servers[1]!
    const page = await browser.newPage()
    try {
      await open(page, server.port, 'localhost')
      await authorize(page, server.bootstrapKey!)
      expect(await tryItOut(page, 'createPet')).toBe('201')
      expect(await tryItOut(page, 'listPets')).toBe('200')
      expect(await tryItOut(page, 'getPet')).toBe('200')
      expect(await page.locator('.errors-wrapper').count()).toBe(0)
    } finally {
      await page.close()
    }
  }, 60_000)
})
