/**
 * Requests sent one after another as a client sends them: a request answered 503 `unavailable` (the
 * limiter or storage missed its deadline, the documented answer on a loaded host, which takes no token)
 * is sent again. On PostgreSQL + Redis on a loaded host Redis now and then answers a take past its
 * deadline: a burst of 60 that kept that answer left its key a token (a fresh-clone CI run: the 61st was
 * a 200), and a loop of 70 through nginx got a 503 where it counted 401s and 429s.
 */

/** `n` answers, bodies read; at most `resends` 503s sent again in all (more is a fault to show). */
export async function inTurn(n: number, send: () => Promise<Response>, resends = 10): Promise<Response[]> {
  const out: Response[] = []
  let resent = 0
  while (out.length < n) {
    const response = await send()
    const body = new TextDecoder().decode(await response.arrayBuffer())
    if (response.status === 503 && resent < resends && unavailable(body)) resent++
    else out.push(response)
  }
  return out
}

function unavailable(body: string): boolean {
  try {
    return (JSON.parse(body) as { code?: string }).code === 'unavailable'
  } catch {
    return false
  }
}
