/**
 * Configuration resolution: flag beats environment variable beats default, per-environment defaults,
 * and refusal of bad values.
 */
import { describe, expect, test } from 'bun:test'
import { ConfigError, resolveConfig, resolveDataFile, withBoundPort } from '../../src/config'
import { SERVER_VARIABLES } from '../support/variables'

describe('resolveConfig precedence', () => {
  test('defaults for production', () => {
    const config = resolveConfig({}, {})
    expect(config).toMatchObject({
      env: 'production',
      port: 8080,
      host: '127.0.0.1',
      baseUrl: 'http://localhost:8080/v1',
      basePath: '/v1',
      dataFile: './data/petstore.db',
      servers: { production: 'http://localhost:8080/v1', staging: 'http://localhost:8081/v1' },
      corsOrigins: [],
      banAfter: 50,
      banSeconds: 600,
      maxBodyBytes: 65536,
    })
    expect(config.trustProxy.none).toBe(true)
  })

  test('staging defaults: port 8081, its own base URL and data file', () => {
    const config = resolveConfig({ env: 'staging' }, {})
    expect(config).toMatchObject({
      env: 'staging',
      port: 8081,
      baseUrl: 'http://localhost:8081/v1',
      dataFile: './data/petstore-staging.db',
      servers: { production: 'http://localhost:8080/v1', staging: 'http://localhost:8081/v1' },
    })
  })

  test('PETSTORE_ENV selects the environment, and --env beats it', () => {
    expect(resolveConfig({}, { PETSTORE_ENV: 'staging' }).env).toBe('staging')
    expect(resolveConfig({ env: 'production' }, { PETSTORE_ENV: 'staging' }).port).toBe(8080)
  })

  test('port: flag beats PETSTORE_PORT beats default', () => {
    expect(resolveConfig({ port: '9000' }, { PETSTORE_PORT: '9100' }).port).toBe(9000)
    expect(resolveConfig({}, { PETSTORE_PORT: '9100' }).port).toBe(9100)
    expect(resolveConfig({}, {}).port).toBe(8080)
  })

  test('without a base URL, the base follows the port', () => {
    expect(resolveConfig({ port: '9000' }, {}).baseUrl).toBe('http://localhost:9000/v1')
    expect(resolveConfig({ env: 'staging' }, { PETSTORE_PORT: '9200' }).baseUrl).toBe('http://localhost:9200/v1')
  })

  test('host: flag beats PETSTORE_HOST beats default', () => {
    expect(resolveConfig({ host: '127.0.0.1' }, { PETSTORE_HOST: '10.0.0.1' }).host).toBe('127.0.0.1')
    expect(resolveConfig({}, { PETSTORE_HOST: '10.0.0.1' }).host).toBe('10.0.0.1')
  })

  test('data file: flag beats PETSTORE_DATA beats the environment default', () => {
    expect(resolveConfig({ data: '/a.db' }, { PETSTORE_DATA: '/b.db' }).dataFile).toBe('/a.db')
    expect(resolveConfig({}, { PETSTORE_DATA: '/b.db' }).dataFile).toBe('/b.db')
    expect(resolveDataFile({}, { PETSTORE_ENV: 'staging' })).toBe('./data/petstore-staging.db')
  })

  test('base URL: flag beats PETSTORE_BASE_URL beats default', () => {
    const env = { PETSTORE_BASE_URL: 'https://env.example/v1' }
    expect(resolveConfig({ baseUrl: 'https://flag.example/v1' }, env).baseUrl).toBe('https://flag.example/v1')
    expect(resolveConfig({}, env).baseUrl).toBe('https://env.example/v1')
    expect(resolveConfig({}, env).servers.production).toBe('https://env.example/v1')
  })

  test('staging reads PETSTORE_STAGING_BASE_URL, not PETSTORE_BASE_URL', () => {
    const env = { PETSTORE_BASE_URL: 'https://prod.example/v1', PETSTORE_STAGING_BASE_URL: 'https://stage.example/v1' }
    const config = resolveConfig({ env: 'staging' }, env)
    expect(config.baseUrl).toBe('https://stage.example/v1')
    expect(config.servers).toEqual({ production: 'https://prod.example/v1', staging: 'https://stage.example/v1' })
    // A production server still lists staging's URL from its variable.
    expect(resolveConfig({}, env).servers.staging).toBe('https://stage.example/v1')
  })

  test('beyond loopback without a base URL, links are relative and the other environment is listed only from its variable', () => {
    expect(resolveConfig({ host: '0.0.0.0' }, {}).servers).toEqual({ production: '/v1', staging: null })
    expect(resolveConfig({ host: '::', env: 'staging' }, {}).servers).toEqual({ production: null, staging: '/v1' })
    const named = resolveConfig({ host: '0.0.0.0' }, { PETSTORE_STAGING_BASE_URL: 'https://stage.example/v1' })
    expect(named.servers).toEqual({ production: '/v1', staging: 'https://stage.example/v1' })
    // With a base URL of its own it is absolute, and the other environment's default is kept.
    expect(resolveConfig({ host: '0.0.0.0', baseUrl: 'https://pets.example/v1' }, {}).servers.staging).toBe('http://localhost:8081/v1')
  })

  test('the base URL is normalised: trailing slash dropped, path kept as the mount point', () => {
    const config = resolveConfig({ baseUrl: 'https://api.example.com/petstore/v1/' }, {})
    expect(config.baseUrl).toBe('https://api.example.com/petstore/v1')
    expect(config.basePath).toBe('/petstore/v1')
  })

  test('withBoundPort gives a port-following base URL the bound port but not an explicit one, and changes neither config', () => {
    const asked = resolveConfig({ port: '0' }, {})
    const following = withBoundPort(asked, 43210)
    expect(following.baseUrl).toBe('http://localhost:43210/v1')
    expect(following.servers.production).toBe('http://localhost:43210/v1')
    expect(asked.baseUrl).toBe('http://localhost:0/v1')
    expect(Object.isFrozen(following) && Object.isFrozen(asked)).toBe(true)
    const explicit = withBoundPort(resolveConfig({ port: '0', baseUrl: 'https://api.example/v1' }, {}), 43210)
    expect(explicit.baseUrl).toBe('https://api.example/v1')
    expect(explicit.port).toBe(43210)
  })

  test('ban settings and CORS origins are read', () => {
    const config = resolveConfig({ banAfter: '3', banSeconds: '60', corsOrigin: ['https://app.example/', '*'] }, {})
    expect(config.banAfter).toBe(3)
    expect(config.banSeconds).toBe(60)
    expect(config.corsOrigins).toEqual(['https://app.example', '*'])
  })
})

describe('an empty variable counts as unset', () => {
  test('every PETSTORE_ variable set empty resolves as none set', () => {
    expect(SERVER_VARIABLES.length).toBeGreaterThan(12)
    const empty = Object.fromEntries(SERVER_VARIABLES.map((name) => [name, '']))
    const { trustProxy: a, ...fromEmpty } = resolveConfig({}, empty)
    const { trustProxy: b, ...fromNone } = resolveConfig({}, {})
    expect(fromEmpty).toEqual(fromNone)
    expect([a.none, b.none]).toEqual([true, true])
    expect(resolveDataFile({}, { PETSTORE_DATA: '' })).toBe('./data/petstore.db')
  })
})

describe('resolveConfig refuses bad values', () => {
  for (const port of ['70000', '65536', '-1', 'abc', '80.5', '', ' 80', '0x50'])
    test(`port ${JSON.stringify(port)}`, () => {
      expect(() => resolveConfig({ port }, {})).toThrow(ConfigError)
      // An empty variable counts as unset (the default port); an empty flag is refused by the CLI.
      if (port === '') expect(resolveConfig({}, { PETSTORE_PORT: port }).port).toBe(8080)
      else expect(() => resolveConfig({}, { PETSTORE_PORT: port })).toThrow(ConfigError)
    })

  test('ports 0 and 65535 are accepted', () => {
    expect(resolveConfig({ port: '0' }, {}).port).toBe(0)
    expect(resolveConfig({ port: '65535' }, {}).port).toBe(65535)
  })

  for (const baseUrl of [
    'not a url',
    'ftp://example.com/v1',
    'http://example.com',
    'http://example.com/',
    'http://example.com/v1?x=1',
    'http://example.com/v1#top',
    '/v1',
  ])
    test(`base URL ${JSON.stringify(baseUrl)}`, () => {
      expect(() => resolveConfig({ baseUrl }, {})).toThrow(ConfigError)
      expect(() => resolveConfig({}, { PETSTORE_BASE_URL: baseUrl })).toThrow(ConfigError)
    })

  test('a bad staging URL is refused even when serving production (it is published in servers)', () => {
    expect(() => resolveConfig({}, { PETSTORE_STAGING_BASE_URL: 'nope' })).toThrow(ConfigError)
  })

  test('an unknown environment', () => {
    expect(() => resolveConfig({ env: 'dev' }, {})).toThrow(ConfigError)
    expect(() => resolveConfig({}, { PETSTORE_ENV: 'Production' })).toThrow(ConfigError)
  })

  test('bad ban settings and CORS origins', () => {
    expect(() => resolveConfig({ banAfter: '0' }, {})).toThrow(ConfigError)
    expect(() => resolveConfig({ banAfter: 'x' }, {})).toThrow(ConfigError)
    expect(() => resolveConfig({ banSeconds: '-5' }, {})).toThrow(ConfigError)
    for (const origin of ['app.example', 'https://app.example/path', 'null', 'https://app.example?x=1'])
      expect(() => resolveConfig({ corsOrigin: [origin] }, {})).toThrow(ConfigError)
  })

  test('error messages name the flag or variable and the bad value', () => {
    expect(() => resolveConfig({ port: '70000' }, {})).toThrow(/--port.*70000/)
    expect(() => resolveConfig({}, { PETSTORE_BASE_URL: 'nope' })).toThrow(/PETSTORE_BASE_URL.*nope/)
  })
})
