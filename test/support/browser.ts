/**
 * Debian's Chromium, driven by playwright-core, as the browser suites launch it. Playwright gives every
 * launch a fresh, empty profile of its own.
 */
import { type Browser, chromium } from 'playwright-core'
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
