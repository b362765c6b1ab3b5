/**
 * The Lua scripts the Redis backend runs, each said above its text, so that each step is atomic however
 * many instances share a subject. The take (LIMITER_SCRIPT) repeats token-bucket.ts and memory/backend.ts
 * with the same floating-point operations in the same order, so it reaches the same doubles; fractions
 * travel as '%.17g' strings, because Redis truncates the numbers a script returns and HSET would store
 * them with 14 digits.
 */
import { DAY_MS, MINUTE_MS } from '../../domain/time'
import { MAX_TURNS } from '../../domain/ban-rule'
import { EARLY, LATE_MS, MAX_CREDIT, NONE_WAITING, ON_TIME } from '../turns'
import { SNAP } from '../token-bucket'

/** The field w of a subject whose turns are settled (turns.ts's settle): the time told reads as 0. */
const NO_TURNS = '0'

/** How long the rejection history a ban start set aside is kept, for the undo of a late answer. */
export const UNDO_KEEP_MS = 60_000

/**
 * Takes for one or more subjects, one after the other, as separate calls of the script would: one call
 * can carry several requests' takes (every argument and every element of the answer costs the client
 * about as much CPU as the call itself, so each take travels as one key and one string).
 * KEYS: each take's subject hash (rpm, rpd, m/mt and d/dt: minute and day tokens and their update times,
 * b: banned until, g: the call that started this subject afresh, w: its turns (turns.ts);
 * its list of the last banAfter+1 counted (early) refusal times (oldest first), the list its last ban start set aside, and the sorted set of address
 * subjects are named from it (one Redis server, no Cluster).
 * ARGV: per take, its fields separated by spaces: rpm, rpd, banAfter, banSeconds, deadline, now, call,
 * maxAddresses, and the prefix's length in bytes. The deadline is the time on Redis's clock after which
 * the caller has given up: a take that only gets to run later (Redis was paused or busy) changes nothing
 * and answers 'late CLOCK'. `now` is empty for Redis's clock, or the caller's (Unix ms). `call` names this
 * take, unique across instances. maxAddresses is empty for a key subject; for an address, the most
 * addresses Redis may hold at once (shared by every instance).
 * Answers per take one string, 'allowed bannedNow m mt d dt bannedUntil now clock g counted w0 w', flags
 * as 0/1 (counted: the request counted toward a ban), w0 and w the turns before and after this take (the
 * time the last refusal told leads them), or
 * 'error MESSAGE' when Redis refused one of its commands.
 */
export const LIMITER_SCRIPT = `
local MINUTE, DAY = ${MINUTE_MS}, ${DAY_MS}
local function fmt(x) return string.format('%.17g', x) end

local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000

-- token-bucket.ts's msUntilToken, the count given.
local function untilToken(tokens, capacity, windowMs, count)
  if tokens >= count then return 0 end
  return ((count - tokens) * windowMs) / capacity
end

-- turns.ts, on turns as {last, told, credit, waiting = {told times, earliest first}}.
local function toldOf(at, now) return math.floor(now + math.max(1, math.ceil((at - now) / 1000)) * 1000) end

local function arrive(t, now)
  local waiting = t.waiting
  local passed = 0
  while passed < #waiting and now - waiting[passed + 1] >= ${LATE_MS} do passed = passed + 1 end
  for _ = 1, passed do table.remove(waiting, 1) end
  if #waiting == 0 then return ${NONE_WAITING} end
  if now < waiting[1] then return ${EARLY} end
  table.remove(waiting, 1)
  return ${ON_TIME}
end

local function counts(t, arrival, hasToken)
  if arrival == ${ON_TIME} then
    if hasToken then t.credit = math.min(t.credit + 1, ${MAX_CREDIT}) end
    return false
  end
  if arrival ~= ${EARLY} or hasToken then return false end
  if t.credit == 0 then return true end
  t.credit = t.credit - 1
  return false
end

-- tokenFor, with the buckets' tokens m and d.
local function tokenFor(t, arrival, m, d, rpm, rpd, now)
  if m < 1 or d < 1 then return false end
  if arrival ~= ${EARLY} then return true end
  local wait = t.waiting[1] - now
  return untilToken(m, rpm, MINUTE, 2) <= wait and untilToken(d, rpd, DAY, 2) <= wait
end

local function nameTurn(t, first, step, now)
  local waiting = t.waiting
  if #waiting > 0 and t.last > now then t.last = math.max(first, t.last + step) else t.last = first end
  t.told = toldOf(t.last, now)
  if #waiting < ${MAX_TURNS} then
    local at = #waiting
    while at > 0 and waiting[at] > t.told do at = at - 1 end
    table.insert(waiting, at + 1, t.told)
  end
end

-- The field w: 'told,last,credit' then each time waiting, all '%.17g'.
local function readTurns(text)
  local values = {}
  for value in string.gmatch(text or '', '[^,]+') do values[#values + 1] = tonumber(value) end
  if #values < 3 then return {last = 0, told = 0, credit = 0, waiting = {}} end
  local waiting = {}
  for i = 4, #values do waiting[i - 3] = values[i] end
  return {told = values[1], last = values[2], credit = values[3], waiting = waiting}
end

-- '${NO_TURNS}' (and anything shorter than the three leading fields) reads as no turns.
local function turnsText(t)
  local parts = {fmt(t.told), fmt(t.last), fmt(t.credit)}
  for i = 1, #t.waiting do parts[3 + i] = fmt(t.waiting[i]) end
  return table.concat(parts, ',')
end

-- token-bucket.ts's refill.
local function refill(now, tokens, updatedAt, capacity, windowMs)
  if now <= updatedAt then return tokens, updatedAt end
  local gained = ((now - updatedAt) * capacity) / windowMs
  local t = math.min(capacity, tokens + gained)
  local whole = math.floor(t + 0.5)
  if math.abs(t - whole) < ${SNAP} then t = whole end
  return t, now
end

-- The keys outlive the subject's state by nothing that matters: they expire once both buckets are full
-- again, the ban is over and the last rejection is a minute old, when a fresh subject would decide
-- alike. The extra second is more than any rounding in refill, which could otherwise leave a bucket a
-- hair below full at the exact time.
local function fullAt(tokens, updatedAt, capacity, windowMs)
  if tokens >= capacity then return updatedAt end
  return updatedAt + ((capacity - tokens) * windowMs) / capacity
end

local function take(key, packed)
  local a, at = {}, 1
  for i = 1, 9 do
    local stop = string.find(packed, ' ', at, true) or (string.len(packed) + 1)
    a[i] = string.sub(packed, at, stop - 1)
    at = stop + 1
  end
  if clock > tonumber(a[5]) then return 'late ' .. fmt(clock) end
  local prefix = string.sub(key, 1, tonumber(a[9]))
  local subject = string.sub(key, tonumber(a[9]) + 3)
  local rejections, setAside = prefix .. 'r:' .. subject, prefix .. 'h:' .. subject
  local now = clock
  if a[6] ~= '' then now = tonumber(a[6]) end
  local rpm, rpd = tonumber(a[1]), tonumber(a[2])

  local state = redis.call('HMGET', key, 'rpm', 'rpd', 'm', 'mt', 'd', 'dt', 'b', 'g', 'w')
  local m, mt, d, dt, bannedUntil, turns
  local turnsBefore = '${NO_TURNS}'
  local generation = state[8] or a[7]
  if tonumber(state[1]) == rpm and tonumber(state[2]) == rpd then
    m, mt, d, dt, bannedUntil = tonumber(state[3]), tonumber(state[4]), tonumber(state[5]), tonumber(state[6]), tonumber(state[7])
    -- An older server's w (the time last named alone) reads as no turns: at most one refusal goes uncounted.
    turns = readTurns(state[9])
    turnsBefore = state[9] or turnsBefore
  else
    -- Not seen (or forgotten, or expired), or seen with other limits: full buckets, no rejections; a ban
    -- stays until it ends or is lifted (FORGET_SCRIPT).
    m, mt, d, dt, bannedUntil, turns = rpm, now, rpd, now, tonumber(state[7]) or 0, readTurns(nil)
    generation = a[7]
    redis.call('DEL', rejections, setAside)
  end
  m, mt = refill(now, m, mt, rpm, MINUTE)
  d, dt = refill(now, d, dt, rpd, DAY)

  -- While banned nothing is taken and nothing counts as a new rejection, so a ban is never extended.
  local allowed, bannedNow, counted = 0, 0, 0
  if bannedUntil <= now then
    local step = math.max(MINUTE / rpm, 1000)
    local arrival = arrive(turns, now)
    local hasToken = tokenFor(turns, arrival, m, d, rpm, rpd, now)
    local ban = false
    if counts(turns, arrival, hasToken) then
      -- A ban starts when the oldest of the last banAfter+1 counted refusals is less than a minute old.
      local size = tonumber(a[3]) + 1
      local count = redis.call('RPUSH', rejections, fmt(now))
      counted = 1
      if count > size then
        redis.call('LTRIM', rejections, -size, -1)
        count = size
      end
      ban = count == size and now - tonumber(redis.call('LINDEX', rejections, 0)) < MINUTE
    end
    if ban then
      -- The refusal that starts a ban says so. It ends as ban-rule.ts's banEnd says.
      bannedUntil, bannedNow = math.floor(now / 1000) * 1000 + tonumber(a[4]) * 1000, 1
      -- A ban refuses every waiting client alike: the turns give way to the time of the next token.
      local first = now + math.max(untilToken(m, rpm, MINUTE, 1), untilToken(d, rpd, DAY, 1))
      turns = {last = first, told = first, credit = 0, waiting = {}}
      -- The history starts afresh; it is set aside a while, in case an answer it counted comes too late.
      redis.call('RENAME', rejections, setAside)
      redis.call('PEXPIRE', setAside, ${UNDO_KEEP_MS})
    elseif hasToken then
      m, d, allowed = m - 1, d - 1, 1
    else
      -- turns.ts's nameTurn: each waiting turn keeps a minute token, so the next is told one more.
      nameTurn(turns, now + math.max(untilToken(m, rpm, MINUTE, #turns.waiting + 1), untilToken(d, rpd, DAY, 1)), step, now)
    end
  end
  -- turns.ts's settle: no turn waiting, no credit, no ban, as no turns at all, and nothing to format.
  local turnsAfter = '${NO_TURNS}'
  if #turns.waiting > 0 or turns.credit > 0 or bannedUntil > now then turnsAfter = turnsText(turns) end
  redis.call('HSET', key, 'rpm', a[1], 'rpd', a[2], 'm', fmt(m), 'mt', fmt(mt), 'd', fmt(d), 'dt', fmt(dt), 'b', fmt(bannedUntil), 'g', generation, 'w', turnsAfter)

  local expireAt = math.max(fullAt(m, mt, rpm, MINUTE), fullAt(d, dt, rpd, DAY), bannedUntil, turns.told)
  local last = redis.call('LINDEX', rejections, -1)
  if last then expireAt = math.max(expireAt, tonumber(last) + MINUTE) end
  expireAt = math.ceil(expireAt) + 1000
  redis.call('PEXPIREAT', key, expireAt)
  if last then redis.call('PEXPIREAT', rejections, expireAt) end

  -- Addresses are bounded, as in process: the set holds each by the time its keys expire, and past the
  -- bound those whose state matters for the shortest time are forgotten first (banned ones last).
  if a[8] ~= '' then
    local addresses = prefix .. 'addresses'
    redis.call('ZREMRANGEBYSCORE', addresses, '-inf', fmt(clock))
    redis.call('ZADD', addresses, expireAt, subject)
    local over = redis.call('ZCARD', addresses) - tonumber(a[8])
    if over > 0 then
      local evicted = redis.call('ZPOPMIN', addresses, over)
      for i = 1, #evicted, 2 do
        redis.call('DEL', prefix .. 's:' .. evicted[i], prefix .. 'r:' .. evicted[i], prefix .. 'h:' .. evicted[i])
      end
    end
    if redis.call('PEXPIRETIME', addresses) < expireAt then redis.call('PEXPIREAT', addresses, expireAt) end
  end

  return table.concat({allowed, bannedNow, fmt(m), fmt(mt), fmt(d), fmt(dt), fmt(bannedUntil), fmt(now), fmt(clock), generation,
    counted, turnsBefore, turnsAfter}, ' ')
end

-- A take that fails (a key of another type, say) fails alone: the others' answers are not lost, since
-- what a script did before an error stays done.
local answers = {}
for i = 1, #KEYS do
  local ok, answer = pcall(take, KEYS[i], ARGV[i])
  if ok then answers[i] = answer
  elseif type(answer) == 'table' and answer.err then answers[i] = 'error ' .. answer.err
  else answers[i] = 'error ' .. tostring(answer) end
end
return answers
`

/**
 * Undoes one take whose answer came after the caller gave up (its client got 503): the token goes back
 * to both buckets (never above capacity); the turns go back to what they were, unless a later take
 * changed them; a counted refusal leaves the history, and when a ban started with it
 * counted (by this call, or by a later one while this answer was on its way), it would not have
 * started without it: it is lifted, and the history it set aside is put back without it.
 * Nothing is undone when the subject was started afresh since (forgotten, expired, evicted, or its
 * limits changed): its generation is another.
 * KEYS: the subject's hash, its rejection list, the list its last ban start set aside.
 * ARGV: generation, allowed, bannedNow, now (as the take pushed it), bannedUntil (as it set it), banAfter,
 * counted, the turns before and after the take (w0, w).
 * Answers 1 when it undid the take, else 0.
 */
export const UNDO_SCRIPT = `
local MINUTE = ${MINUTE_MS}
local function fmt(x) return string.format('%.17g', x) end
local state = redis.call('HMGET', KEYS[1], 'g', 'rpm', 'rpd', 'm', 'd', 'b', 'w')
if state[1] ~= ARGV[1] then return 0 end
if state[7] == ARGV[9] then redis.call('HSET', KEYS[1], 'w', ARGV[8]) end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'm', fmt(math.min(tonumber(state[2]), tonumber(state[4]) + 1)),
    'd', fmt(math.min(tonumber(state[3]), tonumber(state[5]) + 1)))
end
if ARGV[7] == '0' then return 1 end
-- In the history (a ban it started may have been lifted already, which put it back there).
if redis.call('LREM', KEYS[2], -1, ARGV[4]) == 1 then return 1 end

-- Not in the history: a ban started since it was recorded (it ends after it) set it aside.
local startedBy = ARGV[3] == '1' and state[6] == ARGV[5]
local countedToward = ARGV[3] == '0' and tonumber(state[6]) > tonumber(ARGV[4])
if not (startedBy or countedToward) or redis.call('LREM', KEYS[3], -1, ARGV[4]) == 0 then return 0 end
local before = redis.call('LRANGE', KEYS[3], 0, -1)
for i = #before, 1, -1 do redis.call('LPUSH', KEYS[2], before[i]) end
redis.call('LTRIM', KEYS[2], -(tonumber(ARGV[6]) + 1), -1)
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[1], 'b', '0')
local last = redis.call('LINDEX', KEYS[2], -1)
if last then
  local expireAt = math.ceil(tonumber(last) + MINUTE) + 1000
  redis.call('PEXPIREAT', KEYS[2], expireAt)
  redis.call('PEXPIREAT', KEYS[1], expireAt, 'GT')
end
return 1
`

/**
 * A subject's state as the next take would read it, and Redis's clock; changes nothing.
 * KEYS: the subject's hash. Answers {clock, rpm, rpd, m, mt, d, dt, b}, absent fields as ''.
 */
export const PEEK_SCRIPT = `
local time = redis.call('TIME')
local clock = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local state = redis.call('HMGET', KEYS[1], 'rpm', 'rpd', 'm', 'mt', 'd', 'dt', 'b')
for i = 1, 7 do state[i] = state[i] or '' end
return {string.format('%.17g', clock), state[1], state[2], state[3], state[4], state[5], state[6], state[7]}
`

/**
 * One more try under an id (countTry): the ids of one API key share a hash, which lives KEEP ms after
 * the last first try it took and is started afresh once it holds more than MAX ids, so Redis's memory
 * stays bounded however many Idempotency-Keys a client makes up.
 * KEYS: the API key's hash of tries. ARGV: the id within it, KEEP, MAX. Answers the try's number.
 */
export const COUNT_SCRIPT = `
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
if n == 1 then
  if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[3]) then
    redis.call('DEL', KEYS[1])
    redis.call('HSET', KEYS[1], ARGV[1], 1)
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return n
`

/**
 * A key's limit reset, or a lift: drops the subject's keys, once per reset however many instances apply
 * it, and counts the change, so every instance lets go of the bans it holds in memory.
 * KEYS: the subject's hash, its rejection list, the list its last ban set aside, the hash of resets
 * applied (subject -> seq), the count of lifts. ARGV: subject, seq ('' to drop unconditionally).
 * Answers 1 when it dropped the state, else 0.
 */
export const FORGET_SCRIPT = `
if ARGV[2] ~= '' then
  local applied = redis.call('HGET', KEYS[4], ARGV[1])
  if applied and tonumber(applied) >= tonumber(ARGV[2]) then return 0 end
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('INCR', KEYS[5])
return 1
`
