/**
 * The rule for secrets in what the server prints: a database or Redis URL is shown without its
 * password, wherever it is printed (log lines, errors, a storage's location).
 */

/**
 * Query parameters that carry a secret: the password and the client key's passphrase, which Bun's
 * client reads from a PostgreSQL URL as libpq does (a key's path, `sslkey`, is not a secret).
 */
const SECRET_PARAMETERS = new Set(['password', 'sslpassword'])

/** A URL as it may be shown: without a secret, whether the user info or a query parameter carries it. */
export function redactedUrl(url: string): string {
  try {
    const parsed = new URL(url)
    if (parsed.password) parsed.password = '***'
    for (const name of new Set(parsed.searchParams.keys()))
      if (SECRET_PARAMETERS.has(name.toLowerCase())) parsed.searchParams.set(name, '***')
    return parsed.toString()
  } catch {
    return 'the URL given'
  }
}
