/**
 * The host names the console answers to (http/allowed-hosts.ts), by how it is bound, and
 * --console-host as the config resolves it.
 */
import { describe, expect, test } from 'bun:test'
import { resolveConfig } from '../../src/config'
import { AllowedHosts } from '../../src/http/allowed-hosts'

describe('allowed host names', () => {
  test('bound to loopback: its address and the loopback names on its port, nothing else', () => {
    const hosts = new AllowedHosts({ host: '127.0.0.1', port: 8090 }, [])
    for (const host of ['127.0.0.1:8090', 'localhost:8090', 'LocalHost:8090', '[::1]:8090']) expect(hosts.has(host)).toBe(true)
    for (const host of ['rebind.example:8090', 'localhost', 'localhost:8091', '127.0.0.2:8090', '10.0.0.1:8090', '', null])
      expect(hosts.has(host)).toBe(false)
  })

  test('bound to one address: that address only', () => {
    const hosts = new AllowedHosts({ host: '192.0.2.10', port: 8090 }, [])
    expect(hosts.has('192.0.2.10:8090')).toBe(true)
    expect(hosts.has('localhost:8090')).toBe(false)
    expect(hosts.has('192.0.2.11:8090')).toBe(false)
  })

  test('bound to every address: any IP literal on its port, localhost, never a name', () => {
    for (const bound of ['0.0.0.0', '::']) {
      const hosts = new AllowedHosts({ host: bound, port: 8090 }, [])
      for (const host of ['192.0.2.10:8090', '[2001:db8::1]:8090', 'localhost:8090']) expect(hosts.has(host)).toBe(true)
      for (const host of ['192.0.2.10:8091', '192.0.2.10', 'evil.example:8090', '[zz]:8090', '1.2.3.4.5:8090'])
        expect(hosts.has(host)).toBe(false)
    }
  })

  test('names given: alone on any port, with a port on that port only', () => {
    const hosts = new AllowedHosts({ host: '127.0.0.1', port: 8090 }, ['console.example.com', 'ops.example.com:8443'])
    for (const host of ['console.example.com', 'CONSOLE.example.com:443', 'ops.example.com:8443']) expect(hosts.has(host)).toBe(true)
    for (const host of ['ops.example.com', 'ops.example.com:443', 'x.console.example.com']) expect(hosts.has(host)).toBe(false)
  })

  test('--console-host and PETSTORE_CONSOLE_HOST; a bad name is refused with the flag named', () => {
    expect(resolveConfig({}, {}).consoleHosts).toEqual([])
    expect(resolveConfig({ consoleHost: ['A.example', 'b.example:8443'] }, { PETSTORE_CONSOLE_HOST: 'c.example' }).consoleHosts).toEqual([
      'a.example',
      'b.example:8443',
    ])
    expect(resolveConfig({}, { PETSTORE_CONSOLE_HOST: 'c.example, d.example' }).consoleHosts).toEqual(['c.example', 'd.example'])
    expect(() => resolveConfig({ consoleHost: ['bad host'] }, {})).toThrow('--console-host must be a host name')
    expect(() => resolveConfig({}, { PETSTORE_CONSOLE_HOST: 'x.example:99999' })).toThrow('PETSTORE_CONSOLE_HOST must be a host name')
    expect(() => resolveConfig({ consoleHost: ['http://x.example'] }, {})).toThrow('--console-host must be a host name')
  })
})
