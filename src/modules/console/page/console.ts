/**
 * The console's page script: everything it shows and does goes through the console's JSON API, with the
 * session cookie (sent by the browser, never read here) and the page's own Origin. Text from the server is
 * put in the page as text, never as markup. Bundled from index.html by the build (and by the server when run
 * from source).
 */

interface Key {
  id: string
  name: string
  plan: string
  rpm: number
  rpd: number
  lastUsedAt: string | null
  revokedAt: string | null
  dayQuotaLeft: number | null
  bannedUntil: string | null
}

const $ = <T extends Element>(selector: string) => document.querySelector<T>(selector)!
let keys: Key[] = []
let sortBy: keyof Key = 'name'
let ascending = true

/** Calls the console API; a 401 shows the sign-in form again. */
async function api(method: string, path: string, body?: unknown): Promise<any> {
  const response = await fetch(path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  if (response.status === 401 && path !== '/api/session') {
    showSignIn()
    throw new Error('Signed out: sign in again.')
  }
  const text = await response.text()
  const value = text ? JSON.parse(text) : null
  if (!response.ok) throw new Error(value?.message ?? `The console answered ${response.status}.`)
  return value
}

function cell(row: HTMLTableRowElement, text: string | number | null): HTMLTableCellElement {
  const td = row.insertCell()
  td.textContent = text === null ? '-' : String(text)
  return td
}

function button(parent: HTMLElement, label: string, action: () => Promise<unknown>): void {
  const element = document.createElement('button')
  element.type = 'button'
  element.textContent = label
  element.addEventListener('click', () => run(action))
  parent.append(element)
}

/** Runs an action, showing its failure in the page instead of losing it. */
async function run(action: () => Promise<unknown>): Promise<void> {
  $('#error').textContent = ''
  try {
    await action()
  } catch (error) {
    $('#error').textContent = (error as Error).message
  }
}

/** Limit resets and lifted bans reach every instance at its next change poll, within a second. */
const APPLIED_WITHIN_MS = 1_000
const applied = () => new Promise((resolve) => setTimeout(resolve, APPLIED_WITHIN_MS))

const when = (iso: string | null) => (iso === null ? null : new Date(iso).toLocaleString())

function showSignIn(): void {
  $<HTMLElement>('#sign-in').hidden = false
  $<HTMLElement>('#signed-in').hidden = true
  $<HTMLElement>('#who').hidden = true
  $<HTMLElement>('#sign-out').hidden = true
}

async function showConsole(name: string): Promise<void> {
  $<HTMLElement>('#sign-in').hidden = true
  $<HTMLElement>('#signed-in').hidden = false
  $('#who').textContent = `Signed in as ${name}`
  $<HTMLElement>('#who').hidden = false
  $<HTMLElement>('#sign-out').hidden = false
  await showTab('keys')
}

async function showTab(name: string): Promise<void> {
  for (const tab of document.querySelectorAll<HTMLButtonElement>('[data-tab]')) tab.setAttribute('aria-pressed', String(tab.dataset.tab === name))
  for (const section of document.querySelectorAll<HTMLElement>('[data-section]')) section.hidden = section.id !== name
  if (name === 'keys') await loadKeys()
  else if (name === 'bans') await loadBans()
  else if (name === 'requests') await loadRequests()
  else await loadAudit()
}

async function loadKeys(): Promise<void> {
  keys = (await api('GET', '/api/keys')).keys
  drawKeys()
}

function drawKeys(): void {
  const search = $<HTMLInputElement>('#key-search').value.trim().toLowerCase()
  const body = $<HTMLTableSectionElement>('#key-table tbody')
  body.replaceChildren()
  const shown = keys
    .filter((key) => key.revokedAt === null && key.name.toLowerCase().includes(search))
    .sort((a, b) => (String(a[sortBy] ?? '') < String(b[sortBy] ?? '') ? -1 : String(a[sortBy] ?? '') > String(b[sortBy] ?? '') ? 1 : 0) * (ascending ? 1 : -1))
  for (const key of shown) {
    const row = body.insertRow()
    row.dataset.keyId = key.id
    cell(row, key.name || '(no name)')
    cell(row, key.id)
    cell(row, key.plan)
    cell(row, `${key.rpm} / ${key.rpd}`)
    cell(row, key.dayQuotaLeft)
    cell(row, when(key.lastUsedAt))
    cell(row, when(key.bannedUntil))
    const actions = cell(row, '')
    button(actions, 'Revoke', async () => {
      if (!confirm(`Revoke the key "${key.name || key.id}"? Requests with it are refused within a second.`)) return
      await api('DELETE', `/api/keys/${encodeURIComponent(key.id)}`)
      await loadKeys()
    })
    button(actions, 'Reset limits', async () => {
      await api('POST', `/api/keys/${encodeURIComponent(key.id)}/reset-limits`)
      await applied()
      await loadKeys()
    })
    button(actions, 'Change plan', async () => {
      const plan = prompt('New plan: free, pro, business or enterprise', key.plan)
      if (!plan) return
      const limits = plan === 'enterprise' ? { rpm: Number(prompt('Requests per minute')), rpd: Number(prompt('Requests per day')) } : {}
      await api('PUT', `/api/keys/${encodeURIComponent(key.id)}/plan`, { plan, ...limits })
      await loadKeys()
    })
  }
}

async function loadBans(): Promise<void> {
  const { bans } = await api('GET', '/api/bans')
  const body = $<HTMLTableSectionElement>('#ban-table tbody')
  body.replaceChildren()
  for (const ban of bans) {
    const row = body.insertRow()
    cell(row, ban.kind === 'key' ? `key ${ban.keyName || ban.keyId} (${ban.keyId})` : `address ${ban.address}`)
    cell(row, when(ban.bannedUntil))
    const path = ban.kind === 'key' ? `/api/bans/keys/${encodeURIComponent(ban.keyId)}` : `/api/bans/addresses/${encodeURIComponent(ban.address)}`
    button(cell(row, ''), 'Lift', async () => {
      await api('DELETE', path)
      await applied()
      await loadBans()
    })
  }
  if (bans.length === 0) cell(body.insertRow(), 'No bans right now.')
}

async function loadRequests(): Promise<void> {
  const form = new FormData($<HTMLFormElement>('#request-filter'))
  const query = new URLSearchParams({ limit: '500' })
  for (const name of ['key', 'status']) if (form.get(name)) query.set(name, String(form.get(name)))
  const { requests } = await api('GET', `/api/requests?${query}`)
  const body = $<HTMLTableSectionElement>('#request-table tbody')
  body.replaceChildren()
  for (const entry of requests) {
    const row = body.insertRow()
    for (const value of [when(entry.time), entry.method, entry.path, entry.status, entry.keyName ?? entry.keyId ?? entry.client, entry.durationMs, entry.requestId]) cell(row, value)
  }
}

async function loadAudit(): Promise<void> {
  const { entries } = await api('GET', '/api/audit')
  const body = $<HTMLTableSectionElement>('#audit-table tbody')
  body.replaceChildren()
  for (const entry of entries) {
    const row = body.insertRow()
    for (const value of [when(entry.at), entry.actor, entry.action, entry.target]) cell(row, value)
  }
}

function wire(): void {
  $('#sign-in').addEventListener('submit', (event) => {
    event.preventDefault()
    const form = new FormData(event.target as HTMLFormElement)
    const error = $('#sign-in .error')
    error.textContent = ''
    api('POST', '/api/session', { name: form.get('name'), password: form.get('password') })
      .then((me) => showConsole(me.name))
      .catch((failure: Error) => (error.textContent = failure.message))
  })
  $('#sign-out').addEventListener('click', () => run(async () => {
    await api('DELETE', '/api/session')
    showSignIn()
  }))
  for (const tab of document.querySelectorAll<HTMLButtonElement>('[data-tab]')) tab.addEventListener('click', () => run(() => showTab(tab.dataset.tab!)))
  for (const header of document.querySelectorAll<HTMLButtonElement>('[data-sort]'))
    header.addEventListener('click', () => {
      const column = header.dataset.sort as keyof Key
      ascending = column === sortBy ? !ascending : true
      sortBy = column
      drawKeys()
    })
  $('#key-search').addEventListener('input', drawKeys)
  $('#create-key').addEventListener('submit', (event) => {
    event.preventDefault()
    const form = new FormData(event.target as HTMLFormElement)
    const input: Record<string, unknown> = { plan: form.get('plan'), name: form.get('name') }
    for (const limit of ['rpm', 'rpd']) if (form.get(limit)) input[limit] = Number(form.get(limit))
    run(async () => {
      const { secret } = await api('POST', '/api/keys', input)
      $('#secret-value').textContent = secret
      $<HTMLElement>('#secret').hidden = false
      ;(event.target as HTMLFormElement).reset()
      await loadKeys()
    })
  })
  $('#copy-secret').addEventListener('click', () => run(() => navigator.clipboard.writeText($('#secret-value').textContent ?? '')))
  $('#request-filter').addEventListener('submit', (event) => {
    event.preventDefault()
    run(loadRequests)
  })
}

wire()
api('GET', '/api/me').then((me) => showConsole(me.name), showSignIn)
