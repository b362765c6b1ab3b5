/**
 * The console's page script: everything it shows and does goes through the console's JSON API, with the
 * session cookie (sent by the browser, never read here) and the page's own Origin. Text from the server is
 * put in the page as text, never as markup. Bundled from index.html by the build (and by the server when run
 * from source), with uPlot and its stylesheet: nothing is loaded from elsewhere.
 */
import uPlot from 'uplot'
import 'uplot/dist/uPlot.min.css'
// Types only: the server's model declares what each route answers, and nothing of it is bundled.
import type { Model, RevokedKeys, UsageWindow } from '../model'

const WINDOW_WORDS: Record<UsageWindow, string> = { hour: 'the last hour', day: 'the last day', week: 'the last week' }

/** The chart's lines: an outcome class each, with its colour (console.css) and what it means. */
const OUTCOMES = [
  { field: 'ok', label: '2xx', color: '--ok', means: 'answered' },
  { field: 'clientErrors', label: '4xx (not 429)', color: '--client', means: 'bad request, no valid key, no such pet' },
  { field: 'limited', label: '429', color: '--limited', means: 'refused: over a limit, or banned' },
  { field: 'notImplemented', label: '501', color: '--unimplemented', means: 'not implemented here, by design (GET /store/orders)' },
  { field: 'serverErrors', label: '5xx (not 501)', color: '--server', means: 'the server failed' },
] as const

const $ = <T extends Element>(selector: string) => document.querySelector<T>(selector)!
let keys: Model<'Key'>[] = []
let sortBy: keyof Model<'Key'> = 'name'
let ascending = true
let overviewWindow: UsageWindow = 'hour'
let keyWindow: UsageWindow = 'hour'
let shownKey = ''
/** The charts drawn, by container id, with their data, to redraw on a resize or a change of colour scheme. */
const charts = new Map<string, { chart: uPlot; redraw: () => void }>()

/** Calls the console API; a 401 shows the sign-in form again. `T` is what the route answers (model.ts); null for no body. */
async function api<T = null>(method: string, path: string, body?: unknown): Promise<T> {
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
  return value as T
}

/** A cell, labelled with its column's heading: a narrow screen shows each row as a card of labelled figures. */
function cell(row: HTMLTableRowElement, text: string | number | null): HTMLTableCellElement {
  const td = row.insertCell()
  td.textContent = text === null ? '-' : String(text)
  const heading = (row.closest('table') as HTMLTableElement | null)?.tHead?.rows[0]?.cells[td.cellIndex]
  td.dataset.label = heading?.textContent?.trim() ?? ''
  return td
}

/** Fills a table's body with a row per item; with none, a row across its columns that says `empty` (if not ''). */
function fillTable<T>(table: string, items: T[], empty: string, fill: (row: HTMLTableRowElement, item: T) => void): void {
  const body = $<HTMLTableSectionElement>(`${table} tbody`)
  body.replaceChildren()
  for (const item of items) fill(body.insertRow(), item)
  if (items.length > 0 || !empty) return
  const td = body.insertRow().insertCell()
  td.className = 'empty'
  td.colSpan = (body.parentElement as HTMLTableElement).tHead?.rows[0]?.cells.length ?? 1
  td.textContent = empty
}

function cells(row: HTMLTableRowElement, values: (string | number | null)[]): void {
  for (const value of values) cell(row, value)
}

function button(parent: HTMLElement, label: string, action: () => Promise<unknown>): void {
  const element = document.createElement('button')
  element.type = 'button'
  element.textContent = label
  // Busy until done: a lifted ban or reset limits waits a second for every instance before the table shows it.
  element.addEventListener('click', async () => {
    element.disabled = true
    element.textContent = `${label}…`
    await run(action)
    element.disabled = false
    element.textContent = label
  })
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

/** A time in the browser's zone, which it names: an operator comparing with logs in UTC sees which it is. */
const when = (iso: string | null) =>
  iso === null ? null : new Date(iso).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'long' })

/** Shows the sign-in form, or (with an operator's name) the console. */
function signedIn(name: string | null): void {
  $<HTMLElement>('#sign-in').hidden = name !== null
  for (const id of ['#signed-in', '#who', '#sign-out']) $<HTMLElement>(id).hidden = name === null
  if (name !== null) $('#who').textContent = `Signed in as ${name}`
  // A secret left on show is not for whoever signs in next in this tab.
  else {
    $('#secret-value').textContent = ''
    $<HTMLElement>('#secret').hidden = true
  }
}

const showSignIn = () => signedIn(null)

async function showConsole(name: string): Promise<void> {
  signedIn(name)
  await showTab('overview')
}

/** Each tab's loader, by its data-tab. */
const TABS: Record<string, () => Promise<void>> = {
  overview: loadOverview,
  keys: loadKeys,
  deprecation: loadDeprecation,
  bans: loadBans,
  requests: loadRequests,
  audit: loadAudit,
}

/** Shows the section `id` alone, with `tab` pressed. */
function showSection(id: string, tab: string): void {
  pressed('tab', tab)
  for (const section of document.querySelectorAll<HTMLElement>('[data-section]')) section.hidden = section.id !== id
}

async function showTab(name: string): Promise<void> {
  showSection(name, name)
  await TABS[name]!()
}

/** Keys read at a time, in id order: a fleet of thousands is not sent whole to show its first rows. */
const KEYS_PAGE = 500
/** The cursor of the next page of keys; null once every key is read. */
let nextKeys: string | null = null

/** The first page of keys, or with `more` the page after those shown; search and sort apply to the keys read. */
async function loadKeys(more = false): Promise<void> {
  const revoked: RevokedKeys = $<HTMLInputElement>('#key-revoked').checked ? 'include' : 'exclude'
  const after = more && nextKeys !== null ? `&cursor=${encodeURIComponent(nextKeys)}` : ''
  const page = await api<Model<'KeyList'>>('GET', `/api/keys?revoked=${revoked}&limit=${KEYS_PAGE}${after}`)
  keys = more ? [...keys, ...page.keys] : page.keys
  nextKeys = page.next ?? null
  $<HTMLButtonElement>('#more-keys').hidden = nextKeys === null
  drawKeys()
}

/** Keys expiring within this long are marked. */
const EXPIRING_SOON_MS = 7 * 24 * 60 * 60 * 1000

const expired = (key: { expiresAt: string | null }) => key.expiresAt !== null && Date.parse(key.expiresAt) <= Date.now()

/** The expiry as the table shows it: never, the time (marked when within 7 days), or when it expired. */
function expiryText(key: Model<'Key'>): { text: string; soon: boolean } {
  if (key.expiresAt === null) return { text: 'never', soon: false }
  if (expired(key)) return { text: `expired ${when(key.expiresAt)}`, soon: false }
  const soon = Date.parse(key.expiresAt) - Date.now() < EXPIRING_SOON_MS
  return { text: `${when(key.expiresAt)}${soon ? ' (within 7 days)' : ''}`, soon }
}

/**
 * Opens one of the key dialogs for `key`: `prepare` fills its form, `submit` acts on it, then the keys
 * are read again; a refusal is shown in the dialog, which stays open to correct it.
 */
function keyDialog(id: string, key: Model<'Key'>, prepare: (form: HTMLFormElement) => void, submit: (form: FormData) => Promise<void>) {
  const dialog = $<HTMLDialogElement>(`#${id}`)
  const form = dialog.querySelector('form')!
  form.reset()
  dialog.querySelector('.dialog-key')!.textContent = `Key ${key.name || '(no name)'} (${key.id})`
  dialog.querySelector('.error')!.textContent = ''
  prepare(form)
  form.onsubmit = async (event) => {
    event.preventDefault()
    const done = form.querySelector<HTMLButtonElement>('[type=submit]')!
    done.disabled = true
    try {
      await submit(new FormData(form))
      await loadKeys()
      dialog.close()
    } catch (error) {
      dialog.querySelector('.error')!.textContent = (error as Error).message
    } finally {
      done.disabled = false
    }
  }
  dialog.querySelector<HTMLButtonElement>('.cancel')!.onclick = () => dialog.close()
  dialog.showModal()
}

/** Shows a secret once, with Copy: a new key's, or a rolled key's new one. */
function showSecret(keyId: string, secret: string, note: string): void {
  $('#secret-note').textContent = note
  $('#secret-value').textContent = secret
  $<HTMLElement>('#secret').dataset.keyId = keyId
  $<HTMLElement>('#secret').hidden = false
}

/** A time input's value (the browser's local time) for an ISO time, to the minute. */
function localInput(iso: string): string {
  const at = new Date(iso)
  return new Date(at.getTime() - at.getTimezoneOffset() * 60_000).toISOString().slice(0, 16)
}

function drawKeys(): void {
  const search = $<HTMLInputElement>('#key-search').value.trim().toLowerCase()
  // The column sorted by says so, and which way (an arrow, and aria-sort for screen readers).
  for (const header of document.querySelectorAll<HTMLButtonElement>('[data-sort]')) {
    const th = header.parentElement!
    if (header.dataset.sort === sortBy) th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending')
    else th.removeAttribute('aria-sort')
  }
  // Expired keys are listed apart, after the others, as revoked ones are shown apart.
  const shown = keys
    .filter((key) => key.name.toLowerCase().includes(search))
    .sort((a, b) => Number(expired(a)) - Number(expired(b)) || compare(a[sortBy], b[sortBy]) * (ascending ? 1 : -1))
  fillTable('#key-table', shown, '', (row, key) => {
    row.dataset.keyId = key.id
    // The name opens the key's view; its id, under it, saves a column.
    const name = cell(row, '')
    button(name, key.name || '(no name)', () => showKey(key.id))
    const id = document.createElement('small')
    id.textContent = key.id
    name.append(id)
    cells(row, [key.plan, `${key.rpm} / ${key.rpd}`, key.requestsToday, key.limitedToday, key.deprecatedWeek])
    cells(row, [key.dayQuotaLeft, when(key.lastUsedAt), when(key.bannedUntil)])
    const expiry = expiryText(key)
    cell(row, key.revokedAt === null ? expiry.text : null).classList.toggle('expiring', expiry.soon)
    if (expired(key) && key.revokedAt === null) row.classList.add('expired')
    const actions = cell(row, '')
    actions.className = 'actions'
    // A revoked key is shown for the record: nothing can be done with it any more.
    if (key.revokedAt !== null) {
      row.classList.add('revoked')
      actions.textContent = `Revoked ${when(key.revokedAt)}`
      return
    }
    const path = `/api/keys/${encodeURIComponent(key.id)}`
    button(actions, 'Revoke', async () => {
      if (!confirm(`Revoke the key "${key.name || key.id}"? Requests with it are refused within a second.`)) return
      await api('DELETE', path)
      // The new key's secret, still on show, is of no use once that key is revoked.
      if ($<HTMLElement>('#secret').dataset.keyId === key.id) $<HTMLElement>('#secret').hidden = true
      await loadKeys()
    })
    button(actions, 'Reset limits', async () => {
      await api('POST', `${path}/reset-limits`)
      await applied()
      await loadKeys()
    })
    button(actions, 'Plan', async () =>
      keyDialog(
        'plan-dialog',
        key,
        (form) => {
          form.plan.value = key.plan
        },
        async (form) => {
          // Only the limits filled in are sent: an empty box is not a zero.
          const input: Record<string, unknown> = { plan: form.get('plan') }
          for (const limit of ['rpm', 'rpd']) if (form.get(limit)) input[limit] = Number(form.get(limit))
          await api('PUT', `${path}/plan`, input)
        },
      ),
    )
    button(actions, 'Roll secret', async () =>
      keyDialog(
        'roll-dialog',
        key,
        () => {},
        async (form) => {
          const rolled = await api<Model<'RolledKey'>>('POST', `${path}/roll`, { overlapSeconds: Number(form.get('overlap')) })
          showSecret(
            key.id,
            rolled.secret,
            `The new secret of key ${key.name || key.id}, shown only now: copy it, it cannot be shown again. ` +
              `The previous secret works until ${when(rolled.previousSecretEndsAt)}.`,
          )
        },
      ),
    )
    button(actions, 'Expiry', async () =>
      keyDialog(
        'expiry-dialog',
        key,
        (form) => {
          form.never.checked = key.expiresAt === null
          if (key.expiresAt !== null) form.at.value = localInput(key.expiresAt)
        },
        async (form) => {
          const at = String(form.get('at') ?? '')
          if (!form.get('never') && !at) throw new Error('Choose when the key expires, or tick Never expires.')
          const expiresAt = form.get('never') ? null : new Date(at).toISOString()
          await api('PUT', `${path}/expiry`, { expiresAt })
        },
      ),
    )
  })
}

/** Numbers by value, text alphabetically; no value (null) sorts first. */
function compare(a: unknown, b: unknown): number {
  if (a === b) return 0
  if (a === null || a === undefined) return -1
  if (b === null || b === undefined) return 1
  if (typeof a === 'number' && typeof b === 'number') return a - b
  return String(a).localeCompare(String(b))
}

/** A list of figures, each with what it means. */
function figures(list: HTMLElement, items: [label: string, value: string | number | null, means: string][]): void {
  list.replaceChildren()
  for (const [label, value, means] of items) {
    const item = document.createElement('div')
    const term = document.createElement('dt')
    term.textContent = label
    const figure = document.createElement('dd')
    figure.textContent = value === null ? '-' : String(value)
    const hint = document.createElement('dd')
    hint.className = 'hint'
    hint.textContent = means
    item.append(term, figure, hint)
    list.append(item)
  }
}

const ms = (value: number | null) => (value === null ? null : `${value} ms`)

const steps = uPlot.paths.stepped!({ align: 1 })

/** Draws a series' outcome classes over time in `container`, replacing what was there; says its totals in `caption`. */
function drawChart(container: HTMLElement, caption: HTMLElement, series: Model<'Series'>, window: UsageWindow): void {
  charts.get(container.id)?.chart.destroy()
  const start = Date.parse(series.from) / 1000
  // One point more, at the end of the current minute (or hour), so that the last step is drawn as wide as the others.
  const times = [...series.ok, 0].map((_, i) => start + i * series.stepSeconds)
  const line = (column: number[]) => [...column, column.at(-1) ?? 0]
  const style = getComputedStyle(document.documentElement)
  const colour = (name: string) => style.getPropertyValue(name).trim()
  const axis = { stroke: colour('--muted'), grid: { stroke: colour('--line'), width: 1 }, ticks: { stroke: colour('--line'), width: 1 } }
  const chart = new uPlot(
    {
      width: container.clientWidth,
      height: container.clientWidth < 500 ? 220 : 280,
      scales: { x: { time: true }, y: { range: (_chart, _min, max) => [0, Math.max(4, max)] } },
      // Time labels at least 80 px apart, so that they do not run into each other at 390 px.
      axes: [
        { ...axis, space: 80 },
        { ...axis, size: 48 },
      ],
      cursor: { drag: { x: false, y: false } },
      series: [
        { label: 'Time' },
        // Steps: a count holds for its whole minute (or hour).
        ...OUTCOMES.map((outcome) => ({
          label: outcome.label,
          stroke: colour(outcome.color),
          width: 2,
          points: { show: false },
          paths: steps,
        })),
      ],
    },
    [times, ...OUTCOMES.map((outcome) => line(series[outcome.field]))],
    container,
  )
  charts.set(container.id, { chart, redraw: () => drawChart(container, caption, series, window) })
  // The caption sums the lines drawn, so that it says what the chart shows.
  const sums = OUTCOMES.map((outcome) => series[outcome.field].reduce((sum, count) => sum + count, 0))
  caption.textContent =
    `Requests per ${series.resolution} over ${WINDOW_WORDS[window]}: ${sums.reduce((a, b) => a + b, 0)} in all, ` +
    OUTCOMES.map((outcome, i) => `${sums[i]} ${outcome.label}`).join(', ') +
    ". Hover or touch the chart for one point's figures; choose a name in the legend to hide its line."
}

/** Marks the choice of a group (the buttons with a data-`group` attribute) whose value is `value` as pressed. */
function pressed(group: string, value: string): void {
  for (const choice of document.querySelectorAll<HTMLButtonElement>(`[data-${group}]`))
    choice.setAttribute('aria-pressed', String(choice.getAttribute(`data-${group}`) === value))
}

async function loadOverview(): Promise<void> {
  const overview = await api<Model<'Overview'>>('GET', '/api/overview')
  const series = overview[overviewWindow]
  pressed('window', overviewWindow)
  const { total } = series
  figures($('#overview-figures'), [
    ['Requests', total.requests, `in ${WINDOW_WORDS[overviewWindow]}, every instance`],
    ...OUTCOMES.map((outcome): [string, number, string] => [outcome.label, total[outcome.field], outcome.means]),
    ['Median time', ms(total.p50), 'half the requests took at most this (within 2x)'],
    ['p99 time', ms(total.p99), '99 in 100 took at most this (within 2x)'],
    ['Active keys today', overview.activeKeysToday, 'keys with a request in the UTC day so far'],
    [
      'Bans now',
      overview.bansNow,
      overview.limiterAnswered ? 'keys and addresses banned right now' : 'the rate limiter did not answer: there may be more',
    ],
  ])
  drawChart($('#overview-chart'), $('#overview-caption'), series, overviewWindow)
}

async function showKey(id: string): Promise<void> {
  shownKey = id
  showSection('key', 'keys')
  await loadKey()
}

async function loadKey(): Promise<void> {
  const { key, series, refusals } = await api<Model<'KeyUsage'>>(
    'GET',
    `/api/keys/${encodeURIComponent(shownKey)}/usage?window=${keyWindow}`,
  )
  $('#key-title').textContent = `Key ${key.name || '(no name)'} (${key.id}, ${key.plan})`
  pressed('key-window', keyWindow)
  figures($('#key-figures'), [
    ['Requests today', key.today.requests, 'the UTC day so far'],
    ['429s today', key.today.limited, 'refused: over a limit, or banned'],
    ['getPet calls, last day', key.deprecated.day, 'calls of the deprecated GET /pets/{petId}'],
    ['getPet calls, last 7 days', key.deprecated.week, 'the same over a week'],
    ['Last used', when(key.lastUsedAt), 'its last request'],
    key.expiresAt === null
      ? ['Expires', 'never', 'it works until it is revoked']
      : ['Expires', when(key.expiresAt), expired(key) ? 'refused since then (401 key_expired)' : 'refused from then on (401 key_expired)'],
    ...key.versions.map((version): [string, string | null, string] =>
      version.version === 'newest'
        ? ['Newest secret last used', when(version.lastUsedAt), 'its last request with the current secret']
        : ['Previous secret last used', when(version.lastUsedAt), `the secret a roll replaced; it works until ${when(version.endsAt)}`],
    ),
  ])
  drawChart($('#key-chart'), $('#key-caption'), series, keyWindow)
  fillTable('#refusal-table', refusals, 'No refusals among the recent requests.', (row, entry) =>
    cells(row, [when(entry.time), entry.method, entry.path, entry.status, entry.durationMs, entry.requestId]),
  )
}

async function loadDeprecation(): Promise<void> {
  const deprecation = await api<Model<'Deprecation'>>('GET', '/api/deprecation')
  const sunset = new Date(deprecation.sunset).toLocaleDateString(undefined, { dateStyle: 'long', timeZone: 'UTC' })
  $('#sunset-note').textContent =
    `${deprecation.method} ${deprecation.path} (${deprecation.operation}) is deprecated and is removed on ${sunset}: ` +
    `${deprecation.daysLeft} days left. Clients should list pets with GET /pets instead.`
  fillTable('#deprecation-table', deprecation.callers, 'No key called it in the last 7 days.', (row, caller) => {
    button(cell(row, ''), caller.name || caller.keyId, () => showKey(caller.keyId))
    cells(row, [caller.day, caller.week, when(caller.lastCall)])
  })
}

/** Redraws the charts at their containers' width (a resize, a turned phone) and in the current colours. */
function redrawCharts(): void {
  for (const [id, { redraw }] of charts) if (document.getElementById(id)!.offsetParent !== null) redraw()
}

async function loadBans(): Promise<void> {
  const { bans } = await api<Model<'BanList'>>('GET', '/api/bans')
  fillTable('#ban-table', bans, 'No bans right now.', (row, ban) => {
    cell(row, ban.kind === 'key' ? `key ${ban.keyName || ban.keyId} (${ban.keyId})` : `address ${ban.address}`)
    cell(row, when(ban.bannedUntil))
    const path =
      ban.kind === 'key' ? `/api/bans/keys/${encodeURIComponent(ban.keyId)}` : `/api/bans/addresses/${encodeURIComponent(ban.address)}`
    const actions = cell(row, '')
    actions.className = 'actions'
    button(actions, 'Lift', async () => {
      await api('DELETE', path)
      await applied()
      await loadBans()
    })
  })
}

async function loadRequests(): Promise<void> {
  const form = new FormData($<HTMLFormElement>('#request-filter'))
  const query = new URLSearchParams({ limit: '500' })
  for (const name of ['key', 'status']) if (form.get(name)) query.set(name, String(form.get(name)))
  const { requests } = await api<Model<'RecentRequests'>>('GET', `/api/requests?${query}`)
  fillTable('#request-table', requests, '', (row, entry) =>
    cells(row, [
      when(entry.time),
      entry.method,
      entry.path,
      entry.status,
      entry.keyName ?? entry.keyId ?? entry.client,
      entry.durationMs,
      entry.requestId,
    ]),
  )
}

async function loadAudit(): Promise<void> {
  const { entries } = await api<Model<'AuditLog'>>('GET', '/api/audit')
  fillTable('#audit-table', entries, '', (row, entry) => cells(row, [when(entry.at), entry.actor, entry.action, entry.target || null]))
}

function wire(): void {
  $('#sign-in').addEventListener('submit', (event) => {
    event.preventDefault()
    const form = new FormData(event.target as HTMLFormElement)
    const error = $('#sign-in .error')
    error.textContent = ''
    api<Model<'Operator'>>('POST', '/api/session', { name: form.get('name'), password: form.get('password') })
      .then((me) => showConsole(me.name))
      .catch((failure: Error) => (error.textContent = failure.message))
  })
  $('#sign-out').addEventListener('click', () =>
    run(async () => {
      await api('DELETE', '/api/session')
      showSignIn()
    }),
  )
  for (const tab of document.querySelectorAll<HTMLButtonElement>('[data-tab]'))
    tab.addEventListener('click', () => run(() => showTab(tab.dataset.tab!)))
  for (const header of document.querySelectorAll<HTMLButtonElement>('[data-sort]'))
    header.addEventListener('click', () => {
      const column = header.dataset.sort as keyof Model<'Key'>
      ascending = column === sortBy ? !ascending : true
      sortBy = column
      drawKeys()
    })
  $('#key-search').addEventListener('input', drawKeys)
  $('#key-revoked').addEventListener('change', () => run(loadKeys))
  $('#more-keys').addEventListener('click', () => run(() => loadKeys(true)))
  for (const choice of document.querySelectorAll<HTMLButtonElement>('[data-window]'))
    choice.addEventListener('click', () => {
      overviewWindow = choice.dataset.window as UsageWindow
      run(loadOverview)
    })
  for (const choice of document.querySelectorAll<HTMLButtonElement>('[data-key-window]'))
    choice.addEventListener('click', () => {
      keyWindow = choice.dataset.keyWindow as UsageWindow
      run(loadKey)
    })
  $('#back-to-keys').addEventListener('click', () => run(() => showTab('keys')))
  let resizing: ReturnType<typeof setTimeout> | undefined
  addEventListener('resize', () => {
    clearTimeout(resizing)
    resizing = setTimeout(redrawCharts, 200)
  })
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', redrawCharts)
  $('#create-key').addEventListener('submit', (event) => {
    event.preventDefault()
    const form = new FormData(event.target as HTMLFormElement)
    const input: Record<string, unknown> = { plan: form.get('plan'), name: form.get('name') }
    for (const limit of ['rpm', 'rpd']) if (form.get(limit)) input[limit] = Number(form.get(limit))
    run(async () => {
      const { key, secret } = await api<Model<'CreatedKey'>>('POST', '/api/keys', input)
      showSecret(key.id, secret, `The secret of the new key ${key.name || key.id}, shown only now: copy it, it cannot be shown again.`)
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
api<Model<'Operator'>>('GET', '/api/me').then((me) => showConsole(me.name), showSignIn)
