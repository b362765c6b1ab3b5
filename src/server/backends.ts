/**
 * The backends a server runs on, chosen once from the config: storage (the data file or PostgreSQL,
 * each opened by its engine's index) and the limiter's store (this process or Redis). Tests hand the
 * server their own (see ServerOptions).
 */
import type { Config } from '../config'
import { RedisLimiterBackend } from '../limiter/redis/backend'
import type { BanRule, SharedBackend } from '../limiter/backend'
import { openPostgresStorage } from '../storage/postgres'
import { openEmbeddedBackend } from '../storage/sqlite'
import type { BackendOptions, StorageBackend } from '../domain/repositories'

/** Where the limiter keeps its state when shared (Redis); undefined keeps it in this process. */
export type LimiterBackendFactory = (rule: BanRule) => SharedBackend

/** Opens the storage the config names: PostgreSQL when it names a database, else the data file. */
export async function openStorageBackend(config: Config, options: BackendOptions = {}): Promise<StorageBackend> {
  if (!config.database) return openEmbeddedBackend(config.dataFile, options)
  // Shared with other instances: nothing on local disk, nothing to undo.
  const storage = await openPostgresStorage(config.database.url, { pool: config.database.pool })
  return { storage, close: () => storage.close(), undo() {} }
}

export function limiterBackendFactory(config: Config): LimiterBackendFactory | undefined {
  const url = config.redisUrl
  if (!url) return undefined
  return (rule) => new RedisLimiterBackend(rule, { url, maxAddresses: config.maxTrackedAddresses })
}
