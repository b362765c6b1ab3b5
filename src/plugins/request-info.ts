/**
 * The per-request record (`requestInfo` in the context, filled by request-context.ts): the request id,
 * the path routed, the client's address (looked up once, through trusted proxies), the key the gate
 * verified; and how an error is put on the answer.
 */
import { Elysia } from 'elysia'
import type { Server } from 'bun'
import { type ApiError, JSON_TYPE } from '../http/api-errors'
import { MISSING_KEY } from '../http/bearer-token'
import { clientSubject, forwardedClient, normaliseAddress, type TrustedProxies } from '../http/client-address'
import type { ActiveKey } from '../domain/api-key'
import { type AddressSubject, UNKNOWN_CLIENT } from '../domain/subject'
import { bodyUnread } from '../http/json-body'

export type Recorder = (info: RequestInfo, status: number, route: string | undefined) => void

export class RequestInfo {
  /** The authenticated key, once the gate has found one. */
  key: ActiveKey | undefined = undefined
  /** Set only by catch-all routes ('unmatched', 'preflight'); else the answer is recorded under its route's operationId. */
  operation: string | undefined = undefined
  private subject: AddressSubject | undefined
  private clientAddress: string | undefined
  private recorded = false

  constructor(
    readonly requestId: string,
    /** The path that was routed, undecoded, without the query. */
    readonly path: string,
    readonly startedAt: number,
    private readonly server: () => Server<unknown> | null | undefined,
    private readonly request: Request,
    private readonly proxies: Proxies,
    private readonly recorder: Recorder,
  ) {}

  /** Records the answer once, in the metrics, the usage and the access log, under the operation of the route matched. */
  done(status: number, route: string | undefined): void {
    if (this.recorded) return
    this.recorded = true
    this.recorder(this, status, route)
  }

  get method(): string {
    return this.request.method
  }

  /** The client's address, normalised (client-address.ts), looked up on first use: requests with a key never need it. */
  get address(): string {
    return (this.clientAddress ??= clientAddress(this.server(), this.request, this.proxies))
  }

  /** True when the request has a body nobody read (see json-body.ts): its connection must close. */
  get bodyUnread(): boolean {
    return bodyUnread(this.request)
  }

  /** The rate limiter's subject for a request without a valid key. */
  get addressSubject(): AddressSubject {
    return (this.subject ??= clientSubject(this.address))
  }
}

export interface Proxies {
  trusted: TrustedProxies
  /** Called when a trusted proxy sent no X-Forwarded-For: its clients then share its address. */
  onUnforwarded: (proxy: string, request: Request) => void
  /** Called when a trusted proxy's X-Forwarded-For names no address: its clients then share UNKNOWN_CLIENT. */
  onUnreadable: (proxy: string, request: Request) => void
}

export function clientAddress(server: Server<unknown> | null | undefined, request: Request, proxies: Proxies): string {
  const socket = server?.requestIP(request)?.address
  const peer = socket && normaliseAddress(socket)
  if (!peer) return UNKNOWN_CLIENT
  if (!proxies.trusted.has(peer)) return peer
  const forwarded = request.headers.get('x-forwarded-for')
  // An empty header is sent, and names nobody: as an empty entry, unreadable.
  if (forwarded === null) {
    proxies.onUnforwarded(peer, request)
    return peer
  }
  const client = forwardedClient(peer, forwarded, proxies.trusted)
  if (client !== null) return client
  proxies.onUnreadable(peer, request)
  return UNKNOWN_CLIENT
}

/** The key the gate verified; a handler reached without one (a bug) answers as a missing key, never a 500. */
export function verifiedKey(info: RequestInfo): ActiveKey {
  if (!info.key) throw MISSING_KEY
  return info.key
}

/** The per-request record in the context, for every instance that reads `info`; requestContext fills it. */
export const requestInfo = new Elysia({ name: 'request-info' }).decorate('info', undefined as unknown as RequestInfo)

/** What a handler or hook sets of its answer. */
export type AnswerSet = { status?: number | string; headers: Record<string, unknown> }

/**
 * Puts an error's status, headers and body on the answer; returns the body to send. A refusal that left
 * the body unread closes the connection, else it stays held, with what arrived, until the client stops.
 */
export function answerWith(set: AnswerSet, info: RequestInfo | undefined, error: ApiError): string {
  set.status = error.status
  set.headers['content-type'] = JSON_TYPE
  Object.assign(set.headers, error.headers)
  if (info?.bodyUnread) set.headers.connection = 'close'
  return error.body
}
