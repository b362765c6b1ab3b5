/**
 * The API's recent answers (this instance's) as the console shows them: ISO times, the key's name beside
 * its id; and one key's recent refusals for its view.
 */
import type { Storage } from '../../../domain/repositories'
import type { RecentFilter, RecentRequests } from '../../../observability/recent-requests'
import { type Model, REFUSALS, REFUSALS_SHOWN } from '../model'

export class RecentAnswers {
  constructor(
    private readonly recent: RecentRequests,
    private readonly storage: Storage,
  ) {}

  async list(filter: RecentFilter): Promise<Model<'RecentRequest'>[]> {
    const requests = this.recent.list(filter)
    // One key's rows need its name alone, however many keys there are.
    const { keys: repository } = this.storage
    const keys = filter.keyId ? [await repository.get(filter.keyId)].filter((key) => key !== null) : await repository.list()
    const names = new Map(keys.map((key) => [key.id, key.name]))
    return requests.map((entry) => ({
      ...entry,
      time: new Date(entry.time).toISOString(),
      keyName: entry.keyId ? (names.get(entry.keyId) ?? null) : null,
    }))
  }

  /** The key's newest refusals, at most REFUSALS_SHOWN. */
  async refusals(keyId: string): Promise<Model<'RecentRequest'>[]> {
    return (await Promise.all(REFUSALS.map((status) => this.list({ keyId, status, limit: REFUSALS_SHOWN }))))
      .flat()
      .sort((a, b) => b.time.localeCompare(a.time))
      .slice(0, REFUSALS_SHOWN)
  }
}
