/**
 * The console's routes as its app declares them, read from an app built with stand-ins for everything
 * it would reach (nothing is sent to it here): tests that send something to every route, or compare
 * the document with the routes, take them from the app instead of a list of their own.
 */
import { TrustedProxies } from '../../src/http/client-address'
import { consoleModule } from '../../src/modules/console'

const app = consoleModule({
  storage: {} as never,
  keys: {} as never,
  limiter: {} as never,
  keyless: {} as never,
  recent: {} as never,
  now: Date.now,
  trustProxy: new TrustedProxies([]),
  address: { host: '127.0.0.1', port: 0 },
  hosts: [],
  version: 'test',
  environment: 'production',
  onInternalError: () => {},
})

/** Every route the console app declares: its method and path, with its parameters as `:name`. */
export const CONSOLE_ROUTES: { method: string; path: string }[] = app.routes.map((route) => ({ method: route.method, path: route.path }))

/** Every declared route as [method, path with its parameters filled in]. */
export const DECLARED: [string, string][] = CONSOLE_ROUTES.map(({ method, path }) => [
  method,
  path.replace(':id', 'key_x').replace(':address', '127.0.0.1').replace(':file', 'index.js'),
])

/** What anyone may ask for: the page's files and sign-in. */
export const isPublic = ([method, path]: [string, string]) =>
  (method === 'GET' && !path.startsWith('/api/')) || (method === 'POST' && path === '/api/session')
