/**
 * The access log's hand-built JSON: a field is escaped exactly when JSON needs it, so every line
 * parses back to the values that were logged, whatever the client sent as method or path.
 */
import { describe, expect, test } from 'bun:test'
import fc from 'fast-check'
import { AccessLog } from '../../src/observability/access-log'
import { jsonString } from '../../src/plugins/answer-records'

describe('jsonString', () => {
  test('is a JSON string literal of any text, escaped only when needed', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary' }), fc.string({ unit: 'grapheme-ascii' }), fc.string()), (text) => {
        const literal = jsonString(text)
        expect(JSON.parse(literal)).toBe(text)
        if (/^[\x20-\x7e]*$/.test(text) && !/["\\]/.test(text)) expect(literal).toBe(`"${text}"`)
      }),
      { numRuns: 2000 },
    )
  })

  test('escapes quotes, backslashes, control characters and lone surrogates', () => {
    for (const text of ['a"b', 'a\\b', 'a\nb', '\u0000', '\u007f', '\ud800', 'é'])
      expect(JSON.parse(jsonString(text))).toBe(JSON.parse(JSON.stringify(text)))
    expect(jsonString('/v1/pets')).toBe('"/v1/pets"')
  })
})

describe('AccessLog', () => {
  test('gathers lines and hands them to the sink in one write per flush, and on close', () => {
    const written: string[] = []
    let flushes = 0
    const log = new AccessLog({ write: (text) => written.push(text), flush: () => flushes++ }, { flushEveryMs: 60_000 })
    log.write('{"a":1}')
    log.write('{"b":2}')
    expect(written).toEqual([])
    log.flush()
    expect(written).toEqual(['{"a":1}\n{"b":2}\n'])
    expect(flushes).toBe(1)
    log.write('{"c":3}')
    log.close()
    expect(written).toEqual(['{"a":1}\n{"b":2}\n', '{"c":3}\n'])
    expect(flushes).toBe(2)
    log.close()
    expect(flushes).toBe(2)
  })

  test('hands lines over without waiting for the timer once 64 K characters are gathered', () => {
    const written: string[] = []
    const log = new AccessLog({ write: (text) => written.push(text), flush: () => 0 }, { flushEveryMs: 60_000 })
    const line = `{"pad":"${'x'.repeat(1000)}"}`
    for (let i = 0; i < 70; i++) log.write(line)
    expect(written.length).toBe(1)
    expect(written[0]!.split('\n').length - 1).toBeGreaterThanOrEqual(64)
    log.close()
    expect(written.join('')).toBe(`${line}\n`.repeat(70))
  })

  test('a sink whose write throws stops the log, and the lines it refused are counted as dropped', () => {
    const closed: string[] = []
    const log = new AccessLog(
      {
        write: () => {
          throw Object.assign(new Error('broken pipe'), { code: 'EPIPE' })
        },
        flush: () => 0,
      },
      { flushEveryMs: 60_000, onClosed: (reason) => closed.push(reason) },
    )
    log.write('{"a":1}')
    log.write('{"b":2}')
    log.flush()
    log.write('{"c":3}')
    expect(closed).toEqual(['stdout was closed by its reader'])
    expect(log.dropped).toBe(3)
    log.close()
  })
})

describe('AccessLog bounds', () => {
  test('drops and counts lines past the cap while the reader is behind, and takes lines again once it caught up', async () => {
    let release = () => {}
    const written: string[] = []
    const log = new AccessLog(
      { write: (text) => written.push(text), flush: () => new Promise<number>((resolve) => (release = () => resolve(0))) },
      { flushEveryMs: 60_000, maxPendingBytes: 100 },
    )
    // Eleven characters a line with its newline: nine fit under 100.
    for (let i = 0; i < 20; i++) log.write(`{"line":${i % 10}}`)
    expect(log.dropped).toBe(11)
    log.flush()
    expect(written.join('').split('\n').length - 1).toBe(9)
    release()
    await Bun.sleep(0)
    log.write('{"after":1}')
    log.flush()
    expect(written.at(-1)).toBe('{"after":1}\n')
    log.close()
  })

  test('a sink that answers a flush with nothing is closed: told once, nothing more written', () => {
    const closed: string[] = []
    const written: string[] = []
    const log = new AccessLog(
      { write: (text) => written.push(text), flush: () => undefined },
      { flushEveryMs: 60_000, onClosed: (reason) => closed.push(reason) },
    )
    log.write('{"a":1}')
    log.flush()
    log.write('{"b":2}')
    log.flush()
    expect(closed).toEqual(['stdout was closed by its reader'])
    expect(written).toEqual(['{"a":1}\n'])
    expect(log.dropped).toBe(1)
  })
})
