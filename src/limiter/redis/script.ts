/**
 * The one Lua script the Redis store runs per request, so that refilling, taking, recording a rejection
 * and starting a ban are a single atomic step however many instances share the subject. It repeats
 * token-bucket.ts and memory/store.ts with the same floating-point operations in the same order, so it
 * reaches the same doubles; fractions travel as '%.17g' strings, because Redis truncates the numbers a
 * script returns and HSET would store them with 14 digits.
 *
 * KEYS: the subject's hash (rpm, rpd, m/mt and d/dt: minute and day tokens and their update times,
 * b: banned until), and the list of its last banAfter+1 rejection times, oldest first.
 * ARGV: rpm, rpd, banAfter, banSeconds, deadline, now. The deadline is the time on Redis's clock after
 * which the caller has given up: a script that only gets to run later (Redis was paused or busy) changes
 * nothing and answers {'late', clock}. `now` is '' for Redis's clock, or the caller's (Unix ms).
 * Answers {allowed, bannedNow, m, mt, d, dt, bannedUntil, now, clock}, flags as 0/1.
 */
import { DAY_MS, MINUTE_MS } from '../store'

export const LIMITER_SCRIPT = `
local MINUTE, DAY = ${MINUTE_MS}, ${DAY_MS}
local function fmt(x) return string.format('%.17g', x) end

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
if ARGV[5] ~= '' and clock > tonumber(ARGV[5]) then return {'late', fmt(clock)} end
local now = clock
if ARGV[6] ~= '' then now = tonumber(ARGV[6]) end
local rpm, rpd = tonumber(ARGV[1]), tonumber(ARGV[2])

local state = redis.call('HMGET', KEYS[1], 'rpm', 'rpd', 'm', 'mt', 'd', 'dt', 'b')
local m, mt, d, dt, bannedUntil
if tonumber(state[1]) == rpm and tonumber(state[2]) == rpd then
  m, mt, d, dt, bannedUntil = tonumber(state[3]), tonumber(state[4]), tonumber(state[5]), tonumber(state[6]), tonumber(state[7])
else
  -- Not seen (or forgotten, or expired), or seen with other limits: full buckets, no rejections, no ban.
  m, mt, d, dt, bannedUntil = rpm, now, rpd, now, 0
  redis.call('DEL', KEYS[2])
end

-- token-bucket.ts's refill.
local function refill(tokens, updatedAt, capacity, windowMs)
  if now <= updatedAt then return tokens, updatedAt end
  local gained = ((now - updatedAt) * capacity) / windowMs
  return math.min(capacity, tokens + gained), now
end
m, mt = refill(m, mt, rpm, MINUTE)
d, dt = refill(d, dt, rpd, DAY)

-- While banned nothing is taken and nothing counts as a new rejection, so a ban is never extended.
local allowed, bannedNow = 0, 0
if bannedUntil <= now then
  if m >= 1 and d >= 1 then
    m, d, allowed = m - 1, d - 1, 1
  else
    -- A ban starts when the oldest of the last banAfter+1 rejections is less than a minute old.
    local size = tonumber(ARGV[3]) + 1
    local count = redis.call('RPUSH', KEYS[2], fmt(now))
    if count > size then
      redis.call('LTRIM', KEYS[2], -size, -1)
      count = size
    end
    if count == size and now - tonumber(redis.call('LINDEX', KEYS[2], 0)) < MINUTE then
      bannedUntil, bannedNow = now + tonumber(ARGV[4]) * 1000, 1
      redis.call('DEL', KEYS[2])
    end
  end
end
redis.call('HSET', KEYS[1], 'rpm', ARGV[1], 'rpd', ARGV[2], 'm', fmt(m), 'mt', fmt(mt), 'd', fmt(d), 'dt', fmt(dt), 'b', fmt(bannedUntil))

-- The keys outlive the subject's state by nothing that matters: they expire once both buckets are full
-- again, the ban is over and the last rejection is a minute old, when a fresh subject would decide
-- alike. The extra second is more than any rounding in refill, which could otherwise leave a bucket a
-- hair below full at the exact time.
local function fullAt(tokens, updatedAt, capacity, windowMs)
  if tokens >= capacity then return updatedAt end
  return updatedAt + ((capacity - tokens) * windowMs) / capacity
end
local expireAt = math.max(fullAt(m, mt, rpm, MINUTE), fullAt(d, dt, rpd, DAY), bannedUntil)
local last = redis.call('LINDEX', KEYS[2], -1)
if last then expireAt = math.max(expireAt, tonumber(last) + MINUTE) end
expireAt = math.ceil(expireAt) + 1000
redis.call('PEXPIREAT', KEYS[1], expireAt)
if last then redis.call('PEXPIREAT', KEYS[2], expireAt) end

return {allowed, bannedNow, fmt(m), fmt(mt), fmt(d), fmt(dt), fmt(bannedUntil), fmt(now), fmt(clock)}
`
