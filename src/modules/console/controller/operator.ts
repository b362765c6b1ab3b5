/**
 * The operator behind a request: a script's token (Authorization: Bearer), else the session cookie; with
 * the cookie, a change must also come from the console's own page. A request without a valid credential
 * takes from its address's keyless bucket, as the API's do, so made-up secrets cost an address the API's
 * keyless limit, not a read of storage per request.
 */
import { ApiError } from '../../../http/api-errors'
import { bearerToken } from '../../../http/bearer-token'
import type { Credential } from '../../../domain/operators'
import type { AddressSubject } from '../../../domain/subject'
import type { ConsoleService } from '../service'
import { sessionCookies } from './cookies'

/**
 * The API's limits for requests without a valid key (server/server.ts wires them): the Free plan's per
 * client address. While the limiter does not answer they refuse nothing: the console stays open to
 * operators while Redis is away.
 */
export interface KeylessLimits {
  /** Whether the address's next request would be refused; nothing is taken. */
  refuses(subject: AddressSubject): Promise<boolean>
  /** Takes one request from the address's bucket: the refusal to give when refused, else undefined. */
  take(subject: AddressSubject): Promise<ApiError | undefined>
}

/** The operator behind a request, with the secret that showed it. */
export type Who = Credential & { secret: string }

const SAFE_METHODS = new Set(['GET', 'HEAD'])

export function operatorOf(
  service: ConsoleService,
  limits: KeylessLimits,
  clientOf: (request: Request) => AddressSubject,
  checkOrigin: (request: Request) => void,
  cookieName: string,
): (request: Request) => Promise<Who> {
  /**
   * The session of the cookies' `secrets`. Several cookies of that name can arrive (a sibling site's or
   * another path's beside ours, listed first by the browser): the first that is a live session is the one.
   */
  const session = async (secrets: string[]): Promise<Who> => {
    for (const secret of secrets) {
      try {
        return { ...(await service.authenticate(secret, 'session')), secret }
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 401)) throw error
      }
    }
    // No live one: the service's own 401.
    return { ...(await service.authenticate(undefined, 'session')), secret: '' }
  }

  /** Takes from the address's bucket; refused, a 429 (or the ban's). */
  const keyless = async (subject: AddressSubject): Promise<void> => {
    const refused = await limits.take(subject)
    if (refused) throw refused
  }

  return async (request) => {
    const token = bearerToken(request.headers.get('authorization'))
    const subject = clientOf(request)
    // Storage is asked about a secret it has not refused before only while the client's address has
    // requests left, unless the secret was found live here before: an operator behind a banned address
    // (the proxy's, this machine's) can still lift the ban.
    const secrets = token !== undefined ? [token] : sessionCookies(request.headers.get('cookie'), cookieName)
    const kind = token !== undefined ? 'token' : 'session'
    const wasLive = secrets.some((secret) => service.knownLive(secret, kind))
    const asks = secrets.some((secret) => !service.knownMiss(secret, kind)) && !wasLive
    // Refused by the peek, the request is refused by its take (which counts toward a ban), unless a token came back meanwhile.
    const taken = asks && (await limits.refuses(subject))
    if (taken) await keyless(subject)
    try {
      if (token !== undefined) return { ...(await service.authenticate(token, 'token')), secret: token }
      const credential = await session(secrets)
      if (!SAFE_METHODS.has(request.method)) checkOrigin(request)
      return credential
    } catch (error) {
      // A secret found live here before and ended since (a password reset, a sign-out) is no guess: its
      // 401 costs the address nothing, once (it is a known miss from now on).
      if (error instanceof ApiError && error.status === 401 && !taken && !wasLive) await keyless(subject)
      throw error
    }
  }
}
