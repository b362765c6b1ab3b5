/**
 * The guard of every console route declared after sign-in, one added later included: the operator, found
 * before the body is read; then the query and the key id, checked once: nothing else reaches storage,
 * and no handler sees a parameter it does not declare. A change (sign-out aside) is refused while the
 * data file has a fault, as creates are: it would be acknowledged into a file the restart the fault asks
 * for no longer opens.
 */
import { notFound, unavailable } from '../../../http/api-errors'
import { strictQuery } from '../../../http/query'
import type { RouteInfo, RouteTable } from '../../../http/routes'
import { KEY_ID } from '../../../domain/api-key'
import type { Who } from './operator'

const NO_SUCH_KEY = notFound('No key with this id: a key id is key_ followed by letters, digits, - and _.')

/** Whether a request changes what the data file holds (signing out aside, which only ends a session). */
const changes = (request: Request, route: string) => request.method !== 'GET' && request.method !== 'HEAD' && route !== '/api/session'

export function consoleGuard(operator: (request: Request) => Promise<Who>, routes: RouteTable, storageFault?: () => string | null) {
  const resolveOperator = async ({ request, params, route }: { request: Request; params: unknown; route: string }) => {
    const who = await operator(request)
    const fault = changes(request, route) ? storageFault?.() : null
    if (fault) throw unavailable(`Changes are refused: ${fault}; the server needs a restart on a good data file.`)
    // A query as strict as the API's: only the route's declared parameters, each at most once.
    strictQuery(new URL(request.url).searchParams, routes.queryParameters(request.method, route))
    const id = (params as { id?: string } | undefined)?.id
    if (id !== undefined && !KEY_ID.test(id)) throw NO_SUCH_KEY
    return { who }
  }
  /** Whether a route is behind the guard (the document says which need an operator). */
  const behindGuard = (route: RouteInfo) =>
    ((route.hooks as { beforeHandle?: { fn: unknown }[] }).beforeHandle ?? []).some((hook) => hook.fn === resolveOperator)
  return { resolveOperator, behindGuard }
}
