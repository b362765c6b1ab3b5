/**
 * Client addresses as limiter subjects. One client must not get several buckets by spelling its
 * address differently, so addresses are normalised first: an IPv4-mapped IPv6 address (what a
 * dual-stack socket reports for an IPv4 peer) becomes plain IPv4, and IPv6 is written in its RFC 5952
 * canonical form. IPv6 clients are limited per /64, the smallest block a site is usually given, so the
 * holder of one cannot guess keys at full speed by rotating through its 2^64 addresses.
 */
import { isIPv4, isIPv6 } from 'node:net'
import { type AddressSubject, addressSubject } from '../domain/subject'

/** The address in canonical form, or null when it is not an IP address. */
export function normaliseAddress(address: string): string | null {
  if (isIPv4(address)) return address
  const zone = address.indexOf('%')
  const bare = zone < 0 ? address : address.slice(0, zone)
  if (!isIPv6(bare)) return null
  const groups = ipv6Groups(bare)
  if (isMappedIPv4(groups)) return `${groups[6]! >> 8}.${groups[6]! & 0xff}.${groups[7]! >> 8}.${groups[7]! & 0xff}`
  const normal = formatIPv6(groups)
  // The subject of this address is usually asked for next (a request without a valid key): its groups
  // are kept, so the address is parsed once per request, not twice.
  lastNormal = normal
  lastGroups = groups
  return normal
}

let lastNormal = ''
let lastGroups: number[] = []

/** The limiter's subject for a normalised address: the address for IPv4, its /64 for IPv6. */
export function clientSubject(address: string): AddressSubject {
  if (!address.includes(':')) return addressSubject(address)
  const groups = address === lastNormal ? lastGroups : ipv6Groups(address)
  return addressSubject(`${formatIPv6([groups[0]!, groups[1]!, groups[2]!, groups[3]!, 0, 0, 0, 0])}/64`)
}

function isMappedIPv4(groups: number[]): boolean {
  return groups[5] === 0xffff && groups.slice(0, 5).every((group) => group === 0)
}

/** The eight 16-bit groups of a valid IPv6 address (checked by the caller), embedded IPv4 included. */
function ipv6Groups(address: string): number[] {
  // One pass over the characters: per request for keyless IPv6 clients, where split and spread showed in profiles.
  const head: number[] = []
  const tail: number[] = []
  let groups = head
  let value = 0
  let digits = 0
  for (let i = 0; i < address.length; i++) {
    const char = address.charCodeAt(i)
    if (char === 0x3a /* : */) {
      if (digits > 0) groups.push(value)
      else if (i > 0) groups = tail // the second colon of `::`
      value = 0
      digits = 0
    } else if (char === 0x2e /* . */) {
      // An embedded IPv4 address ends the text: its four octets make the last two groups.
      const [a, b, c, d] = address
        .slice(i - digits)
        .split('.')
        .map(Number) as [number, number, number, number]
      groups.push((a << 8) | b, (c << 8) | d)
      digits = -1
      break
    } else {
      value = value * 16 + (char <= 0x39 ? char - 0x30 : (char | 0x20) - 0x57)
      digits++
    }
  }
  if (digits > 0) groups.push(value)
  if (groups === head) return head
  while (head.length + tail.length < 8) head.push(0)
  for (const group of tail) head.push(group)
  return head
}

/** RFC 5952: lower case, no leading zeros, the longest run of two or more zero groups (the first of equals) as `::`. */
function formatIPv6(groups: number[]): string {
  let bestStart = -1
  let bestLength = 1
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++
      continue
    }
    let end = i
    while (end < 8 && groups[end] === 0) end++
    if (end - i > bestLength) {
      bestStart = i
      bestLength = end - i
    }
    i = end
  }
  // One string, built left to right: per request for keyless IPv6 clients, where map and join showed.
  let text = ''
  for (let i = 0; i < 8; i++) {
    if (i === bestStart) {
      text += '::'
      i += bestLength - 1
    } else {
      if (i > 0 && i !== bestStart + bestLength) text += ':'
      text += groups[i]!.toString(16)
    }
  }
  return text
}

/**
 * The proxies whose `X-Forwarded-For` is believed, as addresses and CIDR blocks (`loopback` stands for
 * 127.0.0.0/8 and ::1). Checked when the server is built, so a typo stops the start, not a request.
 */
export class TrustedProxies {
  /** IPv4 blocks as [network, mask] over unsigned 32-bit numbers: checked per request, so no BigInt. */
  private readonly v4: [number, number][] = []
  /** IPv6 blocks as their eight groups, masked to the prefix: no BigInt either. */
  private readonly v6: { network: number[]; prefix: number }[] = []
  /** The last address asked about and the answer: behind a proxy, the peer is the same every time. */
  private lastAddress = ''
  private lastAnswer = false

  constructor(readonly entries: string[]) {
    for (const entry of entries.flatMap((item) => (item === 'loopback' ? ['127.0.0.0/8', '::1'] : [item]))) {
      const [address = '', prefixText, extra] = entry.split('/')
      const normal = normaliseAddress(address)
      const v6 = normal?.includes(':') ?? false
      const width = v6 ? 128 : 32
      const prefix = prefixText === undefined ? width : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN
      if (!normal || extra !== undefined || !(prefix >= 0 && prefix <= width))
        throw new RangeError(`"${entry}" is not an IP address, a CIDR block like 10.0.0.0/8, or loopback`)
      if (v6) this.v6.push({ network: ipv6Groups(normal).map((group, i) => group & groupMask(prefix, i)), prefix })
      else {
        const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0
        this.v4.push([(ipv4Number(normal) & mask) >>> 0, mask])
      }
    }
  }

  get none(): boolean {
    return this.v4.length === 0 && this.v6.length === 0
  }

  /** True when the normalised address is in one of the blocks. */
  has(address: string): boolean {
    if (this.none) return false
    if (address === this.lastAddress) return this.lastAnswer
    const answer = address.includes(':')
      ? this.v6.some((block) => inBlock(address === lastNormal ? lastGroups : ipv6Groups(address), block.network, block.prefix))
      : this.v4.some(([network, mask]) => (ipv4Number(address) & mask) >>> 0 === network)
    this.lastAddress = address
    this.lastAnswer = answer
    return answer
  }
}

const LOOPBACK = new TrustedProxies(['loopback'])

/** A normalised client address of this machine: 127.0.0.0/8 or ::1. */
export function isLoopbackAddress(address: string): boolean {
  return LOOPBACK.has(address)
}

/** A listening host only this machine reaches: 127.0.0.0/8, ::1 or localhost. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || LOOPBACK.has(normaliseAddress(host) ?? '')
}

/**
 * The client behind trusted proxies (as Express and nginx's realip read `X-Forwarded-For`): from the
 * right, the first entry that is not itself a trusted proxy; the leftmost when all are. An entry may
 * carry a port, as some proxies write it (`192.0.2.7:4711`, `[2001:db8::7]:4711`). Null when an entry
 * a trusted hop appended is no address (`unknown`, a name the proxy made up): that hop's client cannot
 * be known, and is not the hop itself, whose address may be trusted with more (/metrics).
 */
export function forwardedClient(peer: string, forwarded: string, trusted: TrustedProxies): string | null {
  let client = peer
  // From the right, one entry at a time, without splitting the whole header; an empty entry is no address.
  for (let end = forwarded.length; end >= 0 && trusted.has(client); ) {
    const start = forwarded.lastIndexOf(',', end - 1) + 1
    const hop = forwardedAddress(forwarded.slice(start, end).trim())
    if (!hop) return null
    client = hop
    end = start - 1
  }
  return client
}

const PORT = /^:\d{1,5}$/

/** An X-Forwarded-For entry's address, normalised, without a port; null when it holds none. */
function forwardedAddress(entry: string): string | null {
  if (entry.charCodeAt(0) === 0x5b /* [ */) {
    const close = entry.indexOf(']')
    if (close < 0 || (close < entry.length - 1 && !PORT.test(entry.slice(close + 1)))) return null
    return normaliseAddress(entry.slice(1, close))
  }
  // One colon is an IPv4 address and its port; IPv6 has at least two.
  const colon = entry.indexOf(':')
  if (colon < 0 || colon !== entry.lastIndexOf(':')) return normaliseAddress(entry)
  const address = entry.slice(0, colon)
  return PORT.test(entry.slice(colon)) && isIPv4(address) ? address : null
}

/** A dotted IPv4 address (already checked) as an unsigned 32-bit number. */
function ipv4Number(address: string): number {
  let value = 0
  let octet = 0
  for (let i = 0; i < address.length; i++) {
    const char = address.charCodeAt(i)
    if (char === 0x2e /* . */) {
      value = value * 256 + octet
      octet = 0
    } else octet = octet * 10 + (char - 0x30)
  }
  return value * 256 + octet
}

/** The bits of group `i` (0 to 7) within the first `prefix` bits of an IPv6 address. */
function groupMask(prefix: number, i: number): number {
  const bits = Math.min(16, Math.max(0, prefix - 16 * i))
  return bits === 0 ? 0 : (0xffff << (16 - bits)) & 0xffff
}

function inBlock(groups: number[], network: number[], prefix: number): boolean {
  for (let i = 0; i * 16 < prefix; i++) if ((groups[i]! & groupMask(prefix, i)) !== network[i]) return false
  return true
}
