/**
 * Debian's Chromium, driven by playwright-core, as the browser suites launch it. Playwright gives every
 * launch a fresh, empty profile of its own.
 */
import { type Browser, chromium, type Page } from 'playwright-core'
import { CHROMIUM } from './engines'

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    // The closed network of these machines: no background lookups, no QUIC, no sandbox as root.
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
}

/** A page of `origin` that records every request to another origin and every message of the page (CSP reports). */
export async function openPage(
  browser: Browser,
  width: number,
  origin: string,
): Promise<{ page: Page; foreign: string[]; messages: string[] }> {
  const page = await browser.newPage({ viewport: { width, height: 900 } })
  const foreign: string[] = []
  const messages: string[] = []
  page.on('request', (request) => {
    if (!request.url().startsWith(origin)) foreign.push(request.url())
  })
  page.on('console', (message) => messages.push(message.text()))
  page.on('pageerror', (error) => messages.push(error.message))
  await page.goto(`${origin}/`)
  return { page, foreign, messages }
}

/** Signs the console's first operator in through its form. */
export async function signInAsAdmin(page: Page, password: string): Promise<void> {
  await page.locator('#sign-in input[name=name]').fill('admin')
  await page.locator('#sign-in input[name=password]').fill(password)
  await page.locator('#sign-in button[type=submit]').click()
  await page.locator('#who').waitFor()
}
