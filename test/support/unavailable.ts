/**
 * Requests sent as a client sends them, where a 503 `unavailable` (the limiter or storage missed its
 * deadline: the documented answer on a loaded host, which takes no token) is sent again, so that a test
 * counts the answers it is about. A sign-in answered so may still hold its place in the throttle (the
 * burst in console-sign-in.test.ts counts with that). Seen in fresh-clone runs: Redis past its deadline
 * left a burst of 60 a token (the 61st a 200) and put a 503 among 70 keyless requests through nginx;
 * PostgreSQL past its deadline answered 4, and once 40, of 41 sign-ins at once.
 */

import { eventually } from './binary'

function isUnavailable(response: Response, body: string): boolean {
  if (response.status !== 503) return false
  try {
    return (JSON.parse(body) as { code?: string }).code === 'unavailable'
  } catch {
    return false
  }
}

/** `n` answers to requests sent one after another, their bodies read; at most `resends` sent again in all. */
export async function inTurn(n: number, send: () => Promise<Response>, resends = 10): Promise<Response[]> {
  const out: Response[] = []
  let resent = 0
  while (out.length < n) {
    const response = await send()
    const body = await response.text()
    if (isUnavailable(response, body) && resent < resends) resent++
    else out.push(response)
  }
  return out
}

/**
 * The answers to `sends` sent all at once. Those answered 503 `unavailable` are sent again, all at once,
 * once `ready()` (as a client does after "try again shortly"; 15 s at most), for at most `rounds`
 * rounds; `resent` holds each such answer's body. The answers' bodies are left to read.
 */
export async function atOnce(
  sends: (() => Promise<Response>)[],
  ready: () => Promise<boolean>,
  rounds = 3,
): Promise<{ answers: Response[]; resent: string[] }> {
  const answers = await Promise.all(sends.map((send) => send()))
  const resent: string[] = []
  for (let round = 0; round < rounds; round++) {
    const bodies = await Promise.all(answers.map((answer) => answer.clone().text()))
    const again = answers.flatMap((answer, i) => (isUnavailable(answer, bodies[i]!) ? [i] : []))
    if (again.length === 0) break
    for (const i of again) resent.push(bodies[i]!)
    await eventually(ready, 15_000)
    const sentAgain = await Promise.all(again.map((i) => sends[i]!()))
    for (const [k, i] of again.entries()) answers[i] = sentAgain[k]!
  }
  return { answers, resent }
}
