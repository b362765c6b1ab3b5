/**
 * What every answer leaves behind, once per request: its metrics, the key's usage and the console's
 * recent requests (API paths only), and one access-log line.
 */
import type { AccessLog } from '../observability/access-log'
import type { Metrics } from '../observability/metrics'
import type { RecentRequests } from '../observability/recent-requests'
import type { UsageCounter } from '../observability/usage'
import type { Recorder } from './request-info'

let isoMs = 0
let isoText = ''
function isoNow(): string {
  const now = Date.now()
  if (now !== isoMs) {
    isoMs = now
    isoText = new Date(now).toISOString()
  }
  return isoText
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what must be escaped
const NEEDS_ESCAPING = /["\\\u0000-\u001f\u007f-\uffff]/

/** A JSON string literal; JSON.stringify only for text that needs escaping (rare, and costly per request). */
export function jsonString(text: string): string {
  return NEEDS_ESCAPING.test(text) ? JSON.stringify(text) : `"${text}"`
}

/**
 * The access log keeps this much of a path, then `…`: any client, even a banned one, can send a path of
 * 16 KiB (9 characters a byte once escaped), and the log must not grow, or drop others' lines, at that rate.
 */
const LOGGED_PATH_CHARS = 2048

export interface AnswerRecords {
  metrics: Metrics
  accessLog: AccessLog | null
  /** Per-key usage; null when it is not kept (storage that cannot be written). */
  usage: UsageCounter | null
  /** The last answers, for the console. */
  recent: RecentRequests
  /** The operationId of a route, or 'unmatched'. */
  operationOf: (method: string, route: string) => string
  /** Whether a routed path is the API's (http/routes.ts apiPaths): only its answers are usage and recent requests. */
  isApi: (path: string) => boolean
}

export function answerRecorder({ metrics, accessLog, usage, recent, operationOf, isApi }: AnswerRecords): Recorder {
  return (info, status, route) => {
    const seconds = (performance.now() - info.startedAt) / 1000
    // Read once: each read of request.method makes a string.
    const method = info.method
    const operation = info.operation ?? (route === undefined ? 'unmatched' : operationOf(method, route))
    metrics.observe(operation, status, seconds)
    const durationMs = Math.round(seconds * 100_000) / 100
    const key = info.key
    if (isApi(info.path)) {
      usage?.count(key?.id, status, seconds)
      recent.add({
        time: Date.now(),
        method,
        path: info.path,
        status,
        keyId: key ? key.id : null,
        client: key ? null : info.address,
        durationMs,
        requestId: info.requestId,
      })
    }
    if (!accessLog) return
    // Built by hand, as this runs per request: ids, status and time are from known-safe alphabets, and
    // method, path and client are escaped only when they hold a character JSON would escape.
    const who = info.key ? `"keyId":"${info.key.id}"` : `"client":${jsonString(info.address)}`
    accessLog.write(
      `{"time":"${isoNow()}","requestId":"${info.requestId}","method":${jsonString(method)},` +
        `"path":${jsonString(info.path.length > LOGGED_PATH_CHARS ? `${info.path.slice(0, LOGGED_PATH_CHARS)}…` : info.path)},"status":${status},"durationMs":${durationMs},${who}}`,
    )
  }
}
