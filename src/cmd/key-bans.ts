/**
 * Which keys are banned now, for `keys usage`. A command can know it only where the limiter's state lives
 * outside a server: in the Redis the servers share (--redis-url), read as the console reads it (the
 * limiter's SubjectReader). Without Redis a ban lives in the memory of the server that started it (on the
 * data file it is written beside the file only at a stop, for the next server), which no command can read.
 */
import { BAN_AFTER, BAN_SECONDS } from '../domain/ban-rule'
import { keySubject } from '../domain/subject'
import { LimiterUnavailableError } from '../limiter/backend'
import { RedisLimiterBackend } from '../limiter/redis/backend'

/** Each banned key's ban end (ms), or why bans cannot be known here. */
export type KeyBans = { until: Map<string, number> } | { unknown: string }

export async function keyBans(redisUrl: string | null, keyIds: string[]): Promise<KeyBans> {
  if (redisUrl === null) return { unknown: 'without --redis-url, a ban lives only in the memory of the server that started it' }
  // Only read through (a read waits as long as one for the console): the rule, which decides takes, is never used.
  const reader = new RedisLimiterBackend({ banAfter: BAN_AFTER.max, banSeconds: BAN_SECONDS.min }, { url: redisUrl })
  try {
    const held = await Promise.all(keyIds.map((id) => reader.inspect(keySubject(id))))
    const until = new Map<string, number>()
    // A ban outlasts a change of limits (the take keeps it), so it is read whatever limits it was taken under.
    held.forEach((state, i) => {
      if (state && state.bannedUntil > state.now) until.set(keyIds[i]!, state.bannedUntil)
    })
    return { until }
  } catch (error) {
    if (!(error instanceof LimiterUnavailableError)) throw error
    return { unknown: `Redis did not answer (${error.message})` }
  } finally {
    reader.close()
  }
}
