/**
 * Everything around the API, outside the base path and so without key or limit: health and
 * readiness, Prometheus metrics, the OpenAPI document and the docs page. The docs page's script and
 * stylesheet are embedded in the binary, so it renders on a machine with no internet access, and sent
 * compressed (http/assets.ts).
 */
import { Elysia } from 'elysia'
import { toOpenAPISchema } from '@elysiajs/openapi/openapi'
import { SwaggerUIRender } from '@elysiajs/openapi/swagger'
import swaggerScript from 'swagger-ui-dist/swagger-ui-bundle.js' with { type: 'file' }
import swaggerStyle from 'swagger-ui-dist/swagger-ui.css' with { type: 'file' }
import { errorResponse, JSON_TYPE, unavailable } from '../../http/api-errors'
import { compressedAsset, noFavicon, noFraming } from '../../http/assets'
import {
  type AnyElysia,
  asServed,
  components,
  errorExamples,
  errorResponses,
  type ExampleSettings,
  KEY_HINT,
  REQUEST_ID_PARAMETER,
  schemaComponents,
} from '../../http/openapi'
import { requestInfo } from '../../plugins/request-info'
import { preferParameter } from '../../plugins/scenarios'
import { LIMIT_MAX, PetModel, PetStatusSchema } from '../pets/model'

export interface OpsModuleOptions {
  /** The app whose routes the OpenAPI document describes. */
  api: () => AnyElysia
  basePath: string
  servers: Readonly<{ production: string | null; staging: string | null }>
  version: string
  /** Why the server cannot serve now (storage or the limiter does not answer), or null when it can. */
  notReady: () => Promise<string | null>
  /** The /metrics answer for a request and its client's address, or null when the metrics are served on a listener of their own. */
  metrics: ((request: Request, client: string) => Response) | null
  /** Whether requests may force answers with Prefer: then every operation describes the header. */
  scenarios: boolean
  /** The settings the error examples are made with. */
  examples: ExampleSettings
}

const INFO = {
  title: 'Pet Store',
  version: '1.0.0',
  description:
    'A store of animals: list them (filtered by status, paginated by cursor), add one, fetch one. ' +
    'Every operation needs an API key as a bearer token and is rate limited per plan: click Authorize and ' +
    `paste a key. ${KEY_HINT}`,
}

const PREFERENCE_APPLIED = { $ref: '#/components/headers/Preference-Applied' }

/** A route left out of the OpenAPI document, recorded in the log and metrics under its own name. */
function hidden(operationId: string) {
  return { detail: { hide: true, operationId } }
}

function buildDocument(options: OpsModuleOptions) {
  const api = options.api()
  const generated = toOpenAPISchema(api)
  // The generator replaces a route's own path parameters with untyped strings; put the typed ones back,
  // with the X-Request-Id every request may carry, and Prefer's scenarios beside them when they are on.
  for (const route of api.routes) {
    const detail = (route.hooks as { detail?: { parameters?: { name: string }[]; responses?: object } })?.detail
    const item = generated.paths[route.path.replace(/:([^/]+)/g, '{$1}')] as Record<
      string,
      { parameters?: unknown[]; responses?: Record<string, { $ref?: string; headers?: object }> }
    >
    const operation = item?.[route.method.toLowerCase()]
    if (!operation) continue
    operation.parameters = [...(detail?.parameters ?? operation.parameters ?? []), REQUEST_ID_PARAMETER]
    if (options.scenarios && detail?.responses) {
      const takesIdempotencyKey = detail.parameters?.some((parameter) => parameter.name === 'Idempotency-Key') ?? false
      operation.parameters.push(preferParameter(Object.keys(detail.responses).map(Number), takesIdempotencyKey))
      // A Prefer the server cannot honour is a 400 on any operation; any answer may say what a Prefer
      // applied (the shared error answers say it in their components).
      operation.responses = Object.fromEntries(
        Object.entries({ ...errorResponses([400]), ...operation.responses })
          .map(([status, response]) => [
            status,
            response.$ref ? response : { ...response, headers: { ...response.headers, 'Preference-Applied': PREFERENCE_APPLIED } },
          ])
          .sort(),
      )
    }
  }
  const paths = Object.fromEntries(
    Object.entries(generated.paths)
      .filter(([path]) => path.startsWith(`${options.basePath}/`))
      .map(([path, item]) => [path.slice(options.basePath.length), item]),
  )
  const { servers } = options
  return {
    openapi: '3.1.0',
    info: { ...INFO, 'x-server-version': options.version },
    // Swagger UI calls the first server: a relative one is the origin that served the page, so Try it
    // out works at whatever address the page was opened (no cross-origin call).
    servers: [
      { url: options.basePath, description: 'this server' },
      ...(['production', 'staging'] as const).flatMap((name) =>
        servers[name] === null ? [] : [{ url: servers[name], description: name }],
      ),
    ],
    security: [{ bearerAuth: [] }],
    tags: [
      { name: 'pets', description: 'The animals in the store.' },
      { name: 'store', description: 'Orders: named by the interface, not implemented.' },
    ],
    paths,
    components: {
      ...components(options.scenarios),
      examples: errorExamples(options.examples),
      schemas: schemaComponents({ ...PetModel, PetStatus: PetStatusSchema, maxPets: LIMIT_MAX }),
    },
  }
}

/** The docs page takes a key through Authorize and sends requests with it. */
const DOCS_HEADERS = { 'content-type': 'text/html; charset=utf-8', ...noFraming() }

/**
 * Swagger UI's tables are as wide as a desktop at any width: on a phone an expanded operation scrolled
 * sideways. Narrow screens drop the Links column (the document defines no links) and stack each
 * response header's name, description and type. At any width, a code block (a response body, an
 * example) keeps room below its last line for the Copy and Download buttons Swagger UI sets over its
 * bottom right corner, which on a phone covered that line (`!important`: the highlighter sets the
 * block's padding inline).
 */
const NARROW_SCREENS = `<style>
.swagger-ui .highlight-code > pre { padding-bottom: 48px !important }
@media (max-width: 600px) {
  .swagger-ui .response-col_links { display: none }
  .swagger-ui table.headers thead { display: none }
  .swagger-ui table.headers tr, .swagger-ui table.headers td { display: block }
  .swagger-ui table.headers tr { padding: 8px 0; border-bottom: 1px solid rgba(59, 65, 81, 0.2) }
  .swagger-ui table.headers td { padding: 0 0 2px }
}
</style>
</head>`

export function opsModule(options: OpsModuleOptions) {
  let document: string | undefined
  const json = (body: string, status = 200) => new Response(body, { status, headers: { 'content-type': JSON_TYPE } })
  const docsPage = SwaggerUIRender({ title: INFO.title, description: INFO.description, version: INFO.version }, {
    url: '/openapi.json',
    dom_id: '#swagger-ui',
    cdn: '/docs/swagger-ui-bundle.js',
    theme: '/docs/swagger-ui.css',
    autoDarkMode: true,
    validatorUrl: null,
  } as never).replace('</head>', NARROW_SCREENS)

  // What a person or a script finds at the root: where the API, its description and the docs are.
  const root = JSON.stringify({
    name: INFO.title,
    version: options.version,
    api: options.basePath,
    docs: '/docs',
    openapi: '/openapi.json',
  })

  const answerMetrics = options.metrics
  const script = asset(swaggerScript, 'text/javascript; charset=utf-8')
  const style = asset(swaggerStyle, 'text/css; charset=utf-8')
  return new Elysia({ name: 'ops' })
    .use(requestInfo)
    .get('/', () => json(root), hidden('root'))
    .get('/healthz', () => json('{"status":"ok"}'), hidden('healthz'))
    .get(
      '/readyz',
      async () => {
        const problem = await options.notReady()
        return problem === null ? json('{"status":"ready"}') : errorResponse(unavailable(problem))
      },
      hidden('readyz'),
    )
    .use((ops) =>
      answerMetrics ? ops.get('/metrics', ({ request, info }) => answerMetrics(request, info.address), hidden('metrics')) : ops,
    )
    .get('/openapi.json', () => json((document ??= JSON.stringify(asServed(buildDocument(options))))), hidden('openapi.json'))
    .get('/docs', () => new Response(docsPage, { headers: DOCS_HEADERS }), hidden('docs'))
    .get('/docs/swagger-ui-bundle.js', ({ request }) => script(request), hidden('docs/swagger-ui-bundle.js'))
    .get('/docs/swagger-ui.css', ({ request }) => style(request), hidden('docs/swagger-ui.css'))
    .get('/favicon.ico', noFavicon, hidden('favicon.ico'))
}

function asset(path: string, type: string) {
  return compressedAsset(() => Bun.file(path).arrayBuffer(), { 'content-type': type, 'cache-control': 'public, max-age=86400' })
}
