/**
 * Requests generated from the served documents themselves, for every operation of the API and of the
 * console (fast-check, a fixed seed): path, query and header parameters and bodies drawn from their
 * schemas, now and then replaced by any text, with or without credentials, and on staging a `Prefer`
 * drawn from the scenarios the document lists. Every answer is checked against the document of the
 * listener that gave it (test/support/contract.ts: status documented for the operation, required
 * headers there, headers and body valid), every header the server sends is declared on that answer
 * (but HTTP's framing and the console's security headers), and nothing is a 5xx that was not asked for.
 * PETSTORE_DOCUMENT_FUZZ_RUNS sets the runs per operation (default 40).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import fc from 'fast-check'
import { cli, createKeyWithCli } from '../support/binary'
import { checkEveryAnswer, Contract } from '../support/contract'
import { type ConsoleServer, startWithConsole } from '../process/helpers'

type Json = Record<string, any>

const RUNS = Number(process.env.PETSTORE_DOCUMENT_FUZZ_RUNS ?? 40)
const SEED = 20261126
let server: ConsoleServer
let api: Contract
let consoleDoc: Contract
let key: string
let operatorToken: string
let sent = 0

beforeAll(async () => {
  // This suite checks every answer itself, against both documents.
  checkEveryAnswer.enabled = false
  server = await startWithConsole({ args: ['--env', 'staging', '--console-address', '127.0.0.1:0', '--no-access-log'] })
  key = createKeyWithCli(server.dataFile, ['--env', 'staging', '--plan', 'enterprise', '--rpm', '100000000', '--rpd', '100000000'])
  operatorToken = cli(['operators', 'token', 'admin', '--env', 'staging', '--data', server.dataFile]).stdout.trim().split('\n').at(-1)!
  api = await Contract.load(server.origin)
  consoleDoc = await Contract.load(server.console, '/api/openapi.json', { authorization: `Bearer ${operatorToken}` })
})

afterAll(async () => {
  checkEveryAnswer.enabled = true
  console.log(`document fuzz: ${sent} generated requests, ${api?.checked} API and ${consoleDoc?.checked} console answers checked`)
  await server?.stop()
})

/** Values a schema of `doc` allows, as fast-check draws them (the subset of JSON Schema the documents use). */
function valuesOf(contract: Contract, node: Json, depth = 0): fc.Arbitrary<unknown> {
  const schema = contract.resolve(node)
  const alternatives = schema.oneOf ?? schema.anyOf
  if (alternatives) {
    const { oneOf: _, anyOf: __, ...base } = schema
    return fc.oneof(...alternatives.map((alternative: Json) => valuesOf(contract, { ...base, ...contract.resolve(alternative) }, depth)))
  }
  if ('const' in schema) return fc.constant(schema.const)
  if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum)
  switch (schema.type) {
    case 'object': {
      const properties = Object.fromEntries(
        Object.entries<Json>(schema.properties ?? {}).map(([name, property]) => [name, valuesOf(contract, property, depth + 1)]),
      )
      return fc.record(properties, { requiredKeys: schema.required ?? [] })
    }
    case 'array':
      return depth > 3 ? fc.constant([]) : fc.array(valuesOf(contract, schema.items ?? {}, depth + 1), { maxLength: 3 })
    case 'integer': {
      const min = Math.max(Number(schema.minimum ?? -1e6), Number.MIN_SAFE_INTEGER)
      const max = Math.min(Number(schema.maximum ?? 1e6), Number.MAX_SAFE_INTEGER)
      return fc.oneof(fc.integer({ min, max: Math.min(max, min + 1000) }), fc.constantFrom(min, max))
    }
    case 'number':
      return fc.double({ noNaN: true, noDefaultInfinity: true })
    case 'boolean':
      return fc.boolean()
    case 'null':
      return fc.constant(null)
    case 'string':
      if (schema.format === 'ipv4') return fc.ipV4()
      if (schema.format === 'ipv6') return fc.ipV6()
      if (schema.format === 'date-time') return fc.date({ noInvalidDate: true }).map((date) => date.toISOString())
      if (schema.pattern) return fc.stringMatching(new RegExp(schema.pattern))
      return fc.string({ minLength: schema.minLength ?? 0, maxLength: Math.min(schema.maxLength ?? 40, 40) })
    default:
      if (schema.pattern) return fc.stringMatching(new RegExp(schema.pattern))
      if (schema.format === 'ipv4') return fc.ipV4()
      if (schema.format === 'ipv6') return fc.ipV6()
      return fc.jsonValue({ maxDepth: 2 })
  }
}

/** Mostly what the schema allows, sometimes any text: the server must answer both as documented. */
function parameterValue(contract: Contract, schema: Json): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 4, arbitrary: valuesOf(contract, schema).map((value) => (typeof value === 'string' ? value : JSON.stringify(value))) },
    { weight: 1, arbitrary: fc.string({ maxLength: 20 }) },
  )
}

/** The scenarios the description of a `Prefer` parameter lists as examples, and a few it does not know. */
function preferValues(parameter: Json): fc.Arbitrary<string> {
  const listed = /Examples: (.*)$/.exec(parameter.description ?? '')?.[1] ?? ''
  // Delays are left out, to keep the run short; the examples are tried as they are and with odd values.
  const examples = [...(parameter.schema?.enum ?? []), ...[...listed.matchAll(/`([^`]+)`/g)].map((match) => match[1]!)].filter(
    (example: string) => !example.includes('delay'),
  )
  return fc.oneof(
    fc.constantFrom('code=429', ...examples),
    fc.constantFrom('return=minimal', 'code=999', 'fail=x', 'code', 'delay=-1', 'fail=1', ', ,'),
    fc.string({ maxLength: 12 }),
  )
}

interface Operation {
  method: string
  template: string
  parameters: Json[]
  body?: Json
}

function operationsOf(contract: Contract): Operation[] {
  return Object.entries<Json>(contract.doc.paths).flatMap(([template, item]) =>
    Object.entries<Json>(item).map(([method, operation]) => ({
      method: method.toUpperCase(),
      template,
      parameters: (operation.parameters ?? []).map((parameter: Json) => contract.resolve(parameter)),
      body: operation.requestBody?.content?.['application/json']?.schema,
    })),
  )
}

interface Generated {
  path: Record<string, string>
  query: Record<string, string>
  headers: Record<string, string>
  body: unknown
  bodyText: string | undefined
  credentials: 'good' | 'none' | 'wrong'
  contentType: string
}

function requestsFor(contract: Contract, operation: Operation): fc.Arbitrary<Generated> {
  const group = (where: string) =>
    Object.fromEntries(
      operation.parameters
        .filter((parameter) => parameter.in === where)
        .map((parameter) => [
          parameter.name,
          parameter.name === 'Prefer' ? preferValues(parameter) : parameterValue(contract, parameter.schema ?? {}),
        ]),
    )
  const optional = (where: string) =>
    operation.parameters.filter((parameter) => parameter.in === where && parameter.required).map((parameter) => parameter.name as string)
  return fc.record({
    path: fc.record(group('path')) as fc.Arbitrary<Record<string, string>>,
    query: fc.record(group('query'), { requiredKeys: optional('query') }) as fc.Arbitrary<Record<string, string>>,
    headers: fc.record(group('header'), { requiredKeys: [] }) as fc.Arbitrary<Record<string, string>>,
    body: operation.body ? valuesOf(contract, operation.body) : fc.constant(undefined),
    // Now and then a body that is not what the schema allows, or not JSON at all.
    bodyText: fc
      .option(fc.oneof(fc.string({ maxLength: 30 }), fc.constant('{"plan":'), fc.constant('[]')), { freq: 6 })
      .map((text) => text ?? undefined),
    credentials: fc.constantFrom<'good' | 'none' | 'wrong'>('good', 'good', 'good', 'good', 'none', 'wrong'),
    contentType: fc.constantFrom('application/json', 'application/json', 'application/json; charset=utf-8', 'text/plain'),
  })
}

/**
 * Headers an answer may carry without its operation declaring them: HTTP's own framing and the
 * console's security headers, which every answer of that listener carries (see docs/console.md).
 */
const FRAMING = ['content-type', 'content-length', 'date', 'connection', 'keep-alive', 'vary', 'transfer-encoding', 'content-encoding']
const CONSOLE_SECURITY = ['content-security-policy', 'x-frame-options', 'x-content-type-options', 'referrer-policy', 'cache-control']

async function send(
  contract: Contract,
  origin: string,
  prefix: string,
  operation: Operation,
  request: Generated,
  credentials: Record<string, string>,
) {
  let path = operation.template
  for (const [name, value] of Object.entries(request.path)) path = path.replace(`{${name}}`, encodeURIComponent(value || 'x'))
  const query = new URLSearchParams(request.query).toString()
  const headers: Record<string, string> = {}
  // Header values the Fetch API cannot send (control characters, non-Latin-1) are left out rather than sent.
  for (const [name, value] of Object.entries(request.headers)) if (/^[\x20-\x7e]*$/.test(value)) headers[name] = value
  if (request.credentials === 'good') Object.assign(headers, credentials)
  if (request.credentials === 'wrong') headers.authorization = 'Bearer psk_wrong'
  let body: string | undefined
  if (operation.body || (request.bodyText !== undefined && operation.method !== 'GET')) {
    body = request.bodyText ?? JSON.stringify(request.body)
    headers['content-type'] = request.contentType
  }
  const url = `${origin}${prefix}${path}${query ? `?${query}` : ''}`
  const response = await fetch(url, { method: operation.method, headers, body, redirect: 'manual' })
  const text = await response.text()
  sent++
  const where = `${operation.method} ${url} ${JSON.stringify(headers)} ${body ?? ''} -> ${response.status} ${text.slice(0, 300)}`
  try {
    contract.check(operation.method, new URL(url).pathname, response, text)
  } catch (error) {
    throw new Error(`${(error as Error).message}\n  ${where}`)
  }
  return { response, text, where }
}

/** Every header of the answer is declared on it in the document, but those `undeclared` names. */
function checkHeadersDeclared(contract: Contract, operation: Operation, response: Response, undeclared: string[], where: string) {
  const answer = contract.resolve(contract.doc.paths[operation.template][operation.method.toLowerCase()].responses[String(response.status)])
  const documented = new Set([...Object.keys(answer.headers ?? {}).map((name) => name.toLowerCase()), ...undeclared])
  for (const name of response.headers.keys())
    if (!documented.has(name))
      throw new Error(`${operation.method} ${operation.template} ${response.status}: sends ${name}, not declared there\n  ${where}`)
}

describe('requests generated from the served documents', () => {
  test('every API operation answers each as its document says', async () => {
    const operations = operationsOf(api)
    expect(operations.map((operation) => `${operation.method} ${operation.template}`).sort()).toEqual([
      'GET /pets',
      'GET /pets/{petId}',
      'GET /store/orders',
      'POST /pets',
    ])
    const base = new URL(server.base).pathname
    for (const operation of operations)
      await fc.assert(
        fc.asyncProperty(requestsFor(api, operation), async (request) => {
          const { response, where } = await send(api, server.origin, base, operation, request, { authorization: `Bearer ${key}` })
          checkHeadersDeclared(api, operation, response, FRAMING, where)
          // A 5xx only when one was asked for (a Prefer scenario says so) or the operation is not implemented.
          if (response.status >= 500 && response.status !== 501 && !response.headers.has('preference-applied'))
            throw new Error(`an unasked-for ${response.status}\n  ${where}`)
        }),
        { numRuns: RUNS, seed: SEED, endOnFailure: true },
      )
    expect(api.seen.size).toBeGreaterThan(15)
  }, 120_000)

  test('every console operation answers each as its document says', async () => {
    const operations = operationsOf(consoleDoc)
    expect(operations.length).toBeGreaterThanOrEqual(17)
    // The console's own Origin, which sign-in needs (a token needs none).
    const credentials = { authorization: `Bearer ${operatorToken}`, origin: server.console }
    for (const operation of operations)
      await fc.assert(
        fc.asyncProperty(requestsFor(consoleDoc, operation), async (request) => {
          const { response, where } = await send(consoleDoc, server.console, '', operation, request, credentials)
          checkHeadersDeclared(consoleDoc, operation, response, [...FRAMING, ...CONSOLE_SECURITY], where)
          if (response.status >= 500) throw new Error(`a ${response.status}\n  ${where}`)
        }),
        { numRuns: RUNS, seed: SEED, endOnFailure: true },
      )
    expect(consoleDoc.seen.size).toBeGreaterThan(40)
  }, 120_000)
})
