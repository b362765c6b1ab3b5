/**
 * The server's own `/openapi.json`, and its console's `/api/openapi.json`, as test oracles: every answer
 * a suite sees can be checked against the document of the listener that gave it (status documented for
 * the operation, required headers present, every documented header and the JSON body valid against
 * their schemas). Uses ajv, independent of the TypeBox code that made the documents, so a drift between
 * what is served and what is documented fails the suite.
 */
import Ajv2020, { type ValidateFunction } from 'ajv/dist/2020'
import addFormats from 'ajv-formats'

type Json = Record<string, any>

interface Operation {
  template: string
  pattern: RegExp
  method: string
  responses: Json
}

export class Contract {
  /** Answers checked so far, by "METHOD /template STATUS". */
  readonly seen = new Map<string, number>()
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true })
  private readonly validators = new Map<object, ValidateFunction>()
  private readonly operations: Operation[] = []
  private readonly basePath: string

  constructor(readonly doc: Json) {
    addFormats(this.ajv)
    this.ajv.addSchema({ $id: 'doc', components: doc.components })
    this.basePath = new URL(doc.servers[0].url, 'http://relative.invalid').pathname.replace(/\/$/, '')
    for (const [template, item] of Object.entries<Json>(doc.paths)) {
      const pattern = new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`)
      for (const [method, operation] of Object.entries<Json>(item))
        this.operations.push({ template, pattern, method: method.toUpperCase(), responses: operation.responses })
    }
  }

  /** The document at `path` of `origin`; `headers` carry the console's credentials, which its document needs. */
  static async load(origin: string, path = '/openapi.json', headers: Record<string, string> = {}): Promise<Contract> {
    return new Contract(await fetchDocument(origin, path, headers))
  }

  /**
   * As load, for the global hook: one contract for every server whose document is the same but for its
   * servers' hosts and ports. The servers of a suite mostly serve one document, and building a contract
   * and compiling its schemas for each was about a quarter of an API suite's CPU (rate-limits: 0.7 of
   * 2.8 s, for 25 servers). Its `seen` counts the answers of all of them.
   */
  static async loadShared(origin: string, path = '/openapi.json', headers: Record<string, string> = {}): Promise<Contract> {
    const doc = await fetchDocument(origin, path, headers)
    const servers = (doc.servers as Json[]).map((server) => new URL(server.url, 'http://relative.invalid').pathname)
    const key = JSON.stringify({ ...doc, servers })
    let contract = shared.get(key)
    if (!contract) shared.set(key, (contract = new Contract(doc)))
    return contract
  }

  /** Follows local `$ref`s until the node has none. */
  resolve(node: Json): Json {
    let current = node
    for (let depth = 0; typeof current?.$ref === 'string'; depth++) {
      if (depth > 10) throw new Error(`$ref loop at ${node.$ref}`)
      current = current.$ref
        .replace(/^#\//, '')
        .split('/')
        .reduce((object: Json, part: string) => object?.[part.replace(/~1/g, '/').replace(/~0/g, '~')], this.doc)
    }
    if (current === undefined) throw new Error(`unresolved $ref ${node.$ref}`)
    return current
  }

  private validator(schema: Json): ValidateFunction {
    let validate = this.validators.get(schema)
    if (!validate) {
      validate = this.ajv.compile(schema.$ref ? { $ref: `doc${schema.$ref}` } : schema)
      this.validators.set(schema, validate)
    }
    return validate
  }

  /** Whether a value matches a schema of the document (or a `$ref` into it). */
  accepts(schema: Json, value: unknown): boolean {
    return this.validator(schema)(value) === true
  }

  private validate(schema: Json, value: unknown, what: string): void {
    const validate = this.validator(schema)
    if (!validate(value)) throw new Error(`${what} does not match its schema: ${this.ajv.errorsText(validate.errors)}`)
  }

  /** Whether the document describes this method at this path (with the base path). */
  documents(method: string, path: string): boolean {
    const relative = path.slice(this.basePath.length)
    return path.startsWith(`${this.basePath}/`) && this.operations.some((op) => op.method === method && op.pattern.test(relative))
  }

  /**
   * Throws, naming the rule broken, when an answer is not what the document says. `path` is the
   * request's path as sent (with the base path and no query); `body` is the response text.
   */
  check(method: string, path: string, response: { status: number; headers: Headers }, body: string): void {
    if (!path.startsWith(`${this.basePath}/`)) throw new Error(`${path} is outside the API base ${this.basePath}`)
    const relative = path.slice(this.basePath.length)
    const operation = this.operations.find((op) => op.method === method && op.pattern.test(relative))
    if (!operation) throw new Error(`${method} ${relative} is not a documented operation`)
    const where = `${method} ${operation.template} ${response.status}`
    const documented = operation.responses[String(response.status)] ?? operation.responses.default
    if (!documented) throw new Error(`${where}: status ${response.status} is not documented`)
    const answer = this.resolve(documented)

    for (const [name, ref] of Object.entries<Json>(answer.headers ?? {})) {
      const header = this.resolve(ref)
      const value = response.headers.get(name)
      if (value === null) {
        if (header.required) throw new Error(`${where}: required header ${name} is missing`)
        continue
      }
      const typed = header.schema?.type === 'integer' ? (/^-?\d+$/.test(value) ? Number(value) : value) : value
      this.validate(header.schema ?? {}, typed, `${where}: header ${name}: ${JSON.stringify(value)}`)
    }

    const content = answer.content as Json | undefined
    if (content) {
      const type = response.headers.get('content-type') ?? ''
      const media = Object.keys(content).find((m) => type.split(';')[0]!.trim() === m)
      if (!media) throw new Error(`${where}: content-type ${JSON.stringify(type)} is not documented`)
      let parsed: unknown
      try {
        parsed = JSON.parse(body)
      } catch {
        throw new Error(`${where}: body is not JSON: ${body.slice(0, 200)}`)
      }
      this.validate(content[media].schema, parsed, `${where}: body ${body.slice(0, 200)}`)
    } else if (body !== '') throw new Error(`${where}: a body is sent where none is documented`)

    this.seen.set(where, (this.seen.get(where) ?? 0) + 1)
  }

  /** How many answers were checked in all. */
  get checked(): number {
    let total = 0
    for (const count of this.seen.values()) total += count
    return total
  }
}

async function fetchDocument(origin: string, path: string, headers: Record<string, string>): Promise<Json> {
  const response = await unpatchedFetch(`${origin}${path}`, { headers })
  if (response.status !== 200) throw new Error(`${path} answered ${response.status}`)
  return (await response.json()) as Json
}

/** The global hook's contracts by document (loadShared). */
const shared = new Map<string, Contract>()
const documents = new Map<string, Promise<Contract>>()
const unpatchedFetch = globalThis.fetch

/** A console's answer: under /api/, with the console's Content-Security-Policy (every console answer has it). */
const fromConsole = (url: URL, response: Response) =>
  url.pathname.startsWith('/api/') && (response.headers.get('content-security-policy') ?? '').startsWith("default-src 'none'")

interface Answer {
  method: string
  path: string
  response: { status: number; headers: Headers }
  body: string
}

/**
 * The consoles' documents, by origin. A console serves its document only to an operator, so it is read
 * with the first credentials a request to that console carries (a token, a session cookie, or the cookie
 * a sign-in sets); the answers seen before are kept and checked then.
 */
const consoles = new Map<string, { contract?: Contract; loading?: Promise<Contract | undefined>; waiting: Answer[] }>()
const WAITING_MAX = 1_000

function credentials(input: string | URL | Request, init: RequestInit | undefined, response: Response): Record<string, string> | null {
  const sent = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined))
  const authorization = sent.get('authorization')
  if (authorization?.startsWith('Bearer pso_')) return { authorization }
  const cookie = sent.get('cookie') ?? response.headers.get('set-cookie')?.split(';')[0]
  return cookie && /petstore_console=[^;]/.test(cookie) ? { cookie } : null
}

async function checkConsoleAnswer(url: URL, answer: Answer, headers: Record<string, string> | null): Promise<void> {
  let state = consoles.get(url.origin)
  if (!state) consoles.set(url.origin, (state = { waiting: [] }))
  if (!state.contract && headers) {
    state.loading ??= Contract.loadShared(url.origin, '/api/openapi.json', headers).catch(() => undefined)
    const loaded = await state.loading
    state.loading = undefined
    state.contract ??= loaded
  }
  const contract = state.contract
  if (!contract) {
    if (state.waiting.length < WAITING_MAX) state.waiting.push(answer)
    return
  }
  for (const { method, path, response, body } of [...state.waiting.splice(0), answer]) {
    if (!contract.documents(method, path)) continue
    contract.check(method, path, response, body)
    checkEveryAnswer.checked++
    checkEveryAnswer.consoleChecked++
  }
}

/**
 * Makes every `fetch` of the suite check its answer against the contract of the server that gave it:
 * a documented operation under the API base against the server's /openapi.json, a console's answer
 * under /api/ against that console's /api/openapi.json. Suites that check each answer themselves at
 * high volume (fuzz, soak) turn it off with `checkEveryAnswer.enabled = false`.
 */
export const checkEveryAnswer = {
  enabled: true,
  checked: 0,
  /** Of those, the consoles' answers. */
  consoleChecked: 0,
  install(): void {
    globalThis.fetch = Object.assign(async (input: string | URL | Request, init?: RequestInit) => {
      const response = await unpatchedFetch(input, init)
      if (!checkEveryAnswer.enabled) return response
      const url = new URL(response.url || (input instanceof Request ? input.url : String(input)))
      if (url.hostname !== '127.0.0.1') return response
      const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase()
      if (fromConsole(url, response)) {
        const answer = {
          method,
          path: url.pathname,
          response: { status: response.status, headers: new Headers(response.headers) },
          body: await response.clone().text(),
        }
        await checkConsoleAnswer(url, answer, credentials(input, init, response))
        return response
      }
      if (!url.pathname.startsWith('/v1/')) return response
      let contract = documents.get(url.origin)
      if (!contract) {
        contract = Contract.loadShared(url.origin)
        documents.set(url.origin, contract)
      }
      const checker = await contract
      if (!checker.documents(method, url.pathname)) return response
      checker.check(method, url.pathname, response, await response.clone().text())
      checkEveryAnswer.checked++
      return response
    }, unpatchedFetch)
  },
}
