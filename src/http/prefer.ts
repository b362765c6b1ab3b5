/**
 * The `Prefer` request header (RFC 7240 §2), read as its grammar says:
 *
 *   Prefer     = 1#preference
 *   preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] )
 *   parameter  = token [ BWS "=" BWS word ]            word = token / quoted-string
 *
 * Names are case-insensitive, an empty value is no value, and of a preference (or a parameter) given
 * twice only the first counts. Several Prefer fields arrive joined by commas, which is the same list.
 */

export interface Preference {
  /** Lower-cased. */
  name: string
  /** undefined when the preference has no value (or an empty one). */
  value: string | undefined
  /** The preference's parameters by lower-cased name, first one of a name kept. */
  params: Map<string, string | undefined>
}

/** The header is not a list of preferences; `at` is the offset of the first character that breaks it. */
export class PreferSyntaxError extends Error {
  constructor(readonly at: number) {
    super(`is not a list of preferences as RFC 7240 writes them (at character ${at + 1})`)
  }
}

const TOKEN_CHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z]/
const SPACE = /[ \t]/

/** The preferences of a Prefer header's value, by lower-cased name, first of each name kept. */
export function parsePrefer(text: string): Map<string, Preference> {
  const preferences = new Map<string, Preference>()
  let at = 0
  const skipSpace = () => {
    while (at < text.length && SPACE.test(text[at]!)) at++
  }
  const token = (): string => {
    const start = at
    while (at < text.length && TOKEN_CHAR.test(text[at]!)) at++
    if (at === start) throw new PreferSyntaxError(at)
    return text.slice(start, at)
  }
  const quoted = (): string => {
    let value = ''
    for (at++; at < text.length; at++) {
      const char = text[at]!
      if (char === '"') {
        at++
        return value
      }
      if (char === '\\') at++
      if (at >= text.length) break
      value += text[at]
    }
    throw new PreferSyntaxError(at)
  }
  /** `name [= word]`, with the value undefined when absent or empty. */
  const pair = (): [string, string | undefined] => {
    const name = token().toLowerCase()
    skipSpace()
    if (text[at] !== '=') return [name, undefined]
    at++
    skipSpace()
    const value = text[at] === '"' ? quoted() : token()
    return [name, value === '' ? undefined : value]
  }

  while (at < text.length) {
    skipSpace()
    // Empty list elements are allowed (RFC 9110 §5.6.1).
    if (text[at] === ',') {
      at++
      continue
    }
    if (at >= text.length) break
    const [name, value] = pair()
    const params = new Map<string, string | undefined>()
    skipSpace()
    while (text[at] === ';') {
      at++
      skipSpace()
      if (at >= text.length || text[at] === ',' || text[at] === ';') continue
      const [param, paramValue] = pair()
      if (!params.has(param)) params.set(param, paramValue)
      skipSpace()
    }
    if (at < text.length && text[at] !== ',') throw new PreferSyntaxError(at)
    if (!preferences.has(name)) preferences.set(name, { name, value, params })
  }
  return preferences
}
