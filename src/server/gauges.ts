/** The values /metrics reads from the parts that keep them, at the moment it is asked: wiring, so it sits beside app.ts. */
import type { RateLimiter } from '../limiter/limiter'
import type { KeyRegistry } from '../modules/keys/service'
import { MAX_PAGE_UNITS, MAX_PET_UNITS, type PetService } from '../modules/pets/service'
import type { AccessLog } from '../observability/access-log'
import { processFigures } from '../observability/process-metrics'

export function gauges(parts: {
  limiter: Pick<RateLimiter, 'trackedAddresses' | 'degraded'>
  keys: KeyRegistry
  pets: PetService
  accessLog: AccessLog | null
}) {
  const { limiter, keys, pets, accessLog } = parts
  return {
    petstore_rate_limiter_tracked_addresses: { help: 'Client addresses the rate limiter remembers.', value: limiter.trackedAddresses },
    petstore_api_keys_active: { help: 'API keys that are not revoked.', value: keys.size },
    petstore_rate_limiter_degraded: {
      help: 'Whether limits are decided in this process because the shared limiter (Redis) does not answer.',
      value: limiter.degraded ? 1 : 0,
    },
    petstore_page_cache_chars: {
      help: `Characters of JSON held by the list-page cache (at most ${MAX_PAGE_UNITS}).`,
      value: pets.cacheSizes.pages,
    },
    petstore_pet_cache_chars: {
      help: `Characters of JSON held by the single-pet cache (at most ${MAX_PET_UNITS}).`,
      value: pets.cacheSizes.pets,
    },
    petstore_log_lines_dropped_total: {
      help: 'Access-log lines dropped because stdout was not read fast enough, or was closed.',
      value: accessLog?.dropped ?? 0,
      type: 'counter' as const,
    },
    ...processFigures(),
  }
}
