/**
 * The API's one deprecated operation and its dates (RFC 9745, RFC 8594): the pets controller sends them
 * on its answers, the console shows who still calls it before the sunset.
 */

/** The operation deprecated, as its calls are counted (usage, /metrics). */
export const DEPRECATED_OPERATION = 'getPet'

/** getPet was deprecated with interface 1.0.0 and is removed on 5 December 2030. */
export const DEPRECATED_SINCE = '@1767225600'
export const SUNSET = 'Thu, 05 Dec 2030 00:00:00 GMT'
/** The sunset as a sentence says it: 5 December 2030. */
export const SUNSET_DAY = new Date(SUNSET).toLocaleDateString('en-GB', { day: 'numeric', month: 'long', year: 'numeric', timeZone: 'UTC' })
