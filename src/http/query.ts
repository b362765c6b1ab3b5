/**
 * A query as strict for the console as for the API: only the parameters its route declares, each at
 * most once, said once for both.
 */
import { badRequest } from './api-errors'

/**
 * Checks the query's parameters in order, handing each to `each` once it passes: a 400 names the first
 * one the route does not take (`allowed`), or given twice, or that `each` refuses.
 */
export function strictQuery(query: URLSearchParams, allowed: readonly string[], each?: (name: string, value: string) => void): void {
  const seen = new Set<string>()
  for (const [name, value] of query) {
    if (!allowed.includes(name))
      throw badRequest(
        `${name.slice(0, 40)}: is not a known query parameter; ${allowed.length ? `allowed are ${allowed.join(', ')}` : 'this route takes none'}`,
      )
    if (seen.has(name)) throw badRequest(`${name}: is given more than once`)
    seen.add(name)
    each?.(name, value)
  }
}
