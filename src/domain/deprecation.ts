/**
 * The API's one deprecated operation and its dates (RFC 9745, RFC 8594): the pets controller sends them
 * on its answers, the console shows who still calls it before the sunset.
 */

/** The operation deprecated, as its calls are counted (usage, /metrics). */
export const DEPRECATED_OPERATION = 'getPet'

/** getPet was deprecated with interface 1.0.0 and is removed on 5 December 2030. */
export const DEPRECATED_SINCE = '@1767225600'
export const SUNSET = 'Thu, 05 Dec 2030 00:00:00 GMT'
const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December']
const sunset = new Date(SUNSET)
/**
 * The sunset as a sentence says it: 5 December 2030. Not with toLocaleDateString: loading the locale
 * data costs every process (each CLI command, each start) 16 ms of CPU before anything is asked of it.
 */
export const SUNSET_DAY = `${sunset.getUTCDate()} ${MONTHS[sunset.getUTCMonth()]} ${sunset.getUTCFullYear()}`
