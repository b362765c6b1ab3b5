/**
 * Client addresses as limiter subjects, checked against an independent reader: the WHATWG URL parser's
 * IPv6 host, which writes the same canonical form (RFC 5952) for every address but the IPv4-mapped ones (those, with
 * zones and IPv4, are in test/process/addresses.test.ts).
 */
import { describe, expect, test } from 'bun:test'
import fc from 'fast-check'
import { clientSubject, normaliseAddress, TrustedProxies } from '../../src/http/client-address'

/** The URL parser's reading, or null for the few spellings it refuses (an embedded 0.0.0.0 after `::`). */
function canonical(address: string): string | null {
  try {
    return new URL(`http://[${address}]/`).hostname.slice(1, -1)
  } catch {
    return null
  }
}

/** Eight groups, many of them zero (so `::` has runs to choose from), spelled as a client might send them. */
const ipv6Text = fc
  .tuple(
    fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 0xffff })), { minLength: 8, maxLength: 8 }),
    fc.boolean(),
    fc.nat(8),
    fc.nat(8),
    fc.boolean(),
  )
  .filter(([groups]) => !(groups[5] === 0xffff && groups.slice(0, 5).every((group) => group === 0)))
  .map(([groups, upper, gapAt, gapLength, embedded]) => {
    const hex = groups.map((group) => (upper ? group.toString(16).toUpperCase().padStart(4, '0') : group.toString(16)))
    const parts = embedded ? [...hex.slice(0, 6), `${groups[6]! >> 8}.${groups[6]! & 0xff}.${groups[7]! >> 8}.${groups[7]! & 0xff}`] : hex
    // Leave out a run of zero groups as `::`, where there is one at gapAt.
    const end = Math.min(gapAt + gapLength, embedded ? 6 : 8)
    if (gapAt >= end || groups.slice(gapAt, end).some((group) => group !== 0)) return parts.join(':')
    return `${parts.slice(0, gapAt).join(':')}::${parts.slice(end).join(':')}`
  })

describe('client addresses', () => {
  test('IPv6 is written in its canonical form, and limited by its /64', () => {
    fc.assert(
      fc.property(ipv6Text, (text) => {
        const expected = canonical(text)
        fc.pre(expected !== null)
        const normal = normaliseAddress(text)
        expect(normal).toBe(expected)
        // The /64 of the canonical text: its first four groups, the rest zero.
        const first4 = expandedGroups(normal!).slice(0, 4)
        expect(clientSubject(normal!).name).toBe(`ip:${canonical(`${first4.join(':')}:0:0:0:0`)}/64`)
      }),
      { numRuns: 5000 },
    )
  })

  test("an IPv6 address is in a trusted block exactly when its first prefix bits are the block's", () => {
    // The reference: the addresses as 128-bit numbers, compared after shifting out the rest.
    const bits = (normal: string) => expandedGroups(normal).reduce((value, group) => (value << 16n) | BigInt(`0x${group}`), 0n)
    fc.assert(
      fc.property(ipv6Text, ipv6Text, fc.integer({ min: 0, max: 128 }), (block, address, prefix) => {
        const [network, normal] = [normaliseAddress(block), normaliseAddress(address)]
        fc.pre(network !== null && normal !== null && canonical(block) !== null && canonical(address) !== null)
        const shift = BigInt(128 - prefix)
        expect(new TrustedProxies([`${network}/${prefix}`]).has(normal!)).toBe(bits(normal!) >> shift === bits(network!) >> shift)
        // Sharing the block's first prefix bits, whatever the rest: inside.
        const inside = ((bits(network!) >> shift) << shift) | (bits(normal!) & ((1n << shift) - 1n))
        const groups = Array.from({ length: 8 }, (_, i) => ((inside >> BigInt(112 - 16 * i)) & 0xffffn).toString(16))
        // Unless it is an IPv4-mapped address (::ffff:0:0/96), which is normalised to IPv4, as a dual-stack
        // socket's IPv4 peer is: only IPv4 blocks hold it.
        const insideAddress = normaliseAddress(groups.join(':'))!
        expect(new TrustedProxies([`${network}/${prefix}`]).has(insideAddress)).toBe(insideAddress.includes(':'))
      }),
      { numRuns: 3000 },
    )
  })
})

/** The eight groups of canonical text, by the URL parser's reading, as hex strings. */
function expandedGroups(normal: string): string[] {
  const [head = '', tail] = normal.split('::')
  const left = head ? head.split(':') : []
  const right = tail === undefined ? [] : tail ? tail.split(':') : []
  return tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right]
}
