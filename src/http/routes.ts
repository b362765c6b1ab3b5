/**
 * What the app's routes say about themselves, read once after the app is built: each route's
 * operationId (for logs and metrics) and the methods each path allows (for 405 and its Allow header).
 */
export interface RouteInfo {
  method: string
  path: string
  hooks?: unknown
}

export class RouteTable {
  private readonly operations = new Map<string, Map<string, string>>()
  private readonly entries: { pattern: RegExp; methods: string[] }[] = []

  /** Filled once every route exists, before the server listens. */
  read(routes: RouteInfo[]): void {
    const byPath = new Map<string, Set<string>>()
    for (const route of routes) {
      const operationId = (route.hooks as { detail?: { operationId?: string } } | undefined)?.detail?.operationId
      if (operationId) {
        if (!this.operations.has(route.path)) this.operations.set(route.path, new Map())
        this.operations.get(route.path)!.set(route.method, operationId)
      }
      if (route.method === 'OPTIONS' || route.method === 'ALL' || route.path.includes('*')) continue
      if (!byPath.has(route.path)) byPath.set(route.path, new Set())
      byPath.get(route.path)!.add(route.method)
    }
    for (const [path, methods] of byPath)
      this.entries.push({
        pattern: new RegExp(`^${path.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+')}/?$`),
        methods: [...methods].sort(),
      })
  }

  /** The operationId of the route matched, or 'unmatched'. A HEAD request is answered by the GET route. */
  operationOf(method: string, route: string): string {
    return this.operations.get(route)?.get(method === 'HEAD' ? 'GET' : method) ?? 'unmatched'
  }

  /** The methods a path allows, or null when no route has the path. */
  allowed(path: string): string[] | null {
    return this.entries.find((entry) => entry.pattern.test(path))?.methods ?? null
  }
}
