/**
 * What the app's routes say about themselves, read once after the app is built: each route's
 * operationId (for logs and metrics), the statuses it documents (for answers forced on request), the
 * query parameters it declares (for a strict query), and the methods each path allows (for 405 and its
 * Allow header).
 */
/**
 * Whether a routed path is the API's (the base path or under it): what usage counts and the console's
 * recent requests keep, not /healthz, /metrics or the docs.
 */
export function apiPaths(basePath: string): (path: string) => boolean {
  const prefix = `${basePath}/`
  return (path) => path.startsWith(prefix) || path === basePath
}

export interface RouteInfo {
  method: string
  path: string
  hooks?: unknown
}

/** What the table reads of a route's OpenAPI detail. */
type Detail = { operationId?: string; responses?: object; parameters?: { in: string; name: string }[] }

export class RouteTable {
  private readonly operations = new Map<string, Map<string, string>>()
  private readonly entries: { pattern: RegExp; methods: string[]; operations: Map<string, string> }[] = []
  private readonly statuses = new Map<string, number[]>()
  private readonly queries = new Map<string, string[]>()

  /** Filled once every route exists, before the server listens. */
  read(routes: RouteInfo[]): void {
    const byPath = new Map<string, Set<string>>()
    for (const route of routes) {
      const detail = (route.hooks as { detail?: Detail } | undefined)?.detail
      const query = detail?.parameters?.filter((parameter) => parameter.in === 'query').map((parameter) => parameter.name)
      if (query) this.queries.set(`${route.method} ${route.path}`, query)
      const operationId = detail?.operationId
      if (operationId) {
        if (!this.operations.has(route.path)) this.operations.set(route.path, new Map())
        this.operations.get(route.path)!.set(route.method, operationId)
        this.statuses.set(operationId, Object.keys(detail.responses ?? {}).map(Number))
      }
      if (route.method === 'OPTIONS' || route.method === 'ALL' || route.path.includes('*')) continue
      if (!byPath.has(route.path)) byPath.set(route.path, new Set())
      byPath.get(route.path)!.add(route.method)
    }
    for (const [path, methods] of byPath)
      this.entries.push({
        pattern: new RegExp(`^${path.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+')}/?$`),
        methods: [...methods].sort(),
        operations: this.operations.get(path) ?? new Map(),
      })
  }

  /** The operationId served for a method at a path (not a route pattern), or undefined when none is. */
  operationAt(method: string, path: string): string | undefined {
    return this.entries.find((entry) => entry.pattern.test(path))?.operations.get(method === 'HEAD' ? 'GET' : method)
  }

  documentedStatuses(operationId: string): number[] {
    return this.statuses.get(operationId) ?? []
  }

  /** The operationId of the route matched, or 'unmatched'. A HEAD request is answered by the GET route. */
  operationOf(method: string, route: string): string {
    return this.operations.get(route)?.get(method === 'HEAD' ? 'GET' : method) ?? 'unmatched'
  }

  /** The query parameters a route declares. A HEAD request is answered by the GET route. */
  queryParameters(method: string, route: string): string[] {
    return this.queries.get(`${method === 'HEAD' ? 'GET' : method} ${route}`) ?? []
  }

  /** The methods a path allows, or null when no route has the path. */
  allowed(path: string): string[] | null {
    return this.entries.find((entry) => entry.pattern.test(path))?.methods ?? null
  }
}
