"""How ``RedisProviderState`` lays one provider's limiter state out in Redis: its Lua scripts.

Each script is one read-check-write, atomic inside Redis, so two workers can never both
take the last permit. One provider is two keys in one hash slot: a sorted set of the
permits held (holder -> lease expiry, so a permit of a worker that died expires instead of
leaking) and a hash: ``limit`` (the limit last published), ``until`` (the latest instant a
Retry-After named), ``tokens``/``tlast`` (the retry budget and its last refill),
``breaker``/``open_until``/``failures``/``opened`` (the circuit breaker) and ``rejected``
(429s and 503s seen). Numbers travel as the strings Python wrote (``repr``) and come
back as ``%.17g``, never through Lua's 14-digit default.
"""

from __future__ import annotations

__all__ = ["ACQUIRE", "BUDGET", "RELEASE", "SNAPSHOT"]

# KEYS: holders (zset), state (hash)
# ARGV: holder, now, fallback limit, lease expiry
# Returns {'ok', inflight} | {'full', inflight} | {'cooldown', wait} | {'open', wait}
ACQUIRE = """
local now = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local h = redis.call('HMGET', KEYS[2], 'until', 'breaker', 'open_until', 'limit')
local untl = tonumber(h[1] or '0')
if untl > now then return {'cooldown', string.format('%.17g', untl - now)} end
local n = redis.call('ZCARD', KEYS[1])
local breaker = h[2] or 'closed'
if breaker == 'open' then
  local ou = tonumber(h[3] or '0')
  if now < ou then return {'open', string.format('%.17g', ou - now)} end
  breaker = 'half_open'
  redis.call('HSET', KEYS[2], 'breaker', 'half_open')
end
local limit = math.max(1, math.floor(tonumber(h[4] or ARGV[3])))
if breaker == 'half_open' then limit = 1 end
if n >= limit then return {'full', tostring(n)} end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
return {'ok', tostring(n + 1)}
"""

# KEYS: holders, state
# ARGV: holder, now, outcome, retry_after|"", failure threshold, recovery seconds
# Counts only a permit still held, so a release sent twice after a lost reply counts once.
RELEASE = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 'gone' end
local now = tonumber(ARGV[2])
local outcome = ARGV[3]
if ARGV[4] ~= '' then
  local untl = now + tonumber(ARGV[4])
  if untl > tonumber(redis.call('HGET', KEYS[2], 'until') or '0') then
    redis.call('HSET', KEYS[2], 'until', string.format('%.17g', untl))
  end
end
if outcome == 'rejected' then redis.call('HINCRBY', KEYS[2], 'rejected', 1) end
local breaker = redis.call('HGET', KEYS[2], 'breaker') or 'closed'
if outcome == 'ok' or outcome == 'rejected' then
  redis.call('HSET', KEYS[2], 'failures', '0')
  if breaker == 'half_open' then redis.call('HSET', KEYS[2], 'breaker', 'closed') end
  return 'ok'
end
local failures = redis.call('HINCRBY', KEYS[2], 'failures', 1)
if breaker == 'half_open' or failures >= tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[2], 'breaker', 'open', 'failures', '0',
             'open_until', string.format('%.17g', now + tonumber(ARGV[6])))
  redis.call('HINCRBY', KEYS[2], 'opened', 1)
end
return 'ok'
"""

# KEYS: state
# ARGV: now, op ('deposit' | 'take' | 'read'), ratio, refill per second, cap
# Returns the balance after the operation and '1' when a retry was taken, else '0'.
BUDGET = """
local now = tonumber(ARGV[1])
local cap = tonumber(ARGV[5])
local h = redis.call('HMGET', KEYS[1], 'tokens', 'tlast')
local tokens = tonumber(h[1] or ARGV[5])
local last = tonumber(h[2] or ARGV[1])
if now > last then
  tokens = math.min(cap, tokens + (now - last) * tonumber(ARGV[4]))
  last = now
end
local took = '0'
if ARGV[2] == 'deposit' then
  tokens = math.min(cap, tokens + tonumber(ARGV[3]))
elseif ARGV[2] == 'take' and tokens >= 1 then
  tokens = tokens - 1
  took = '1'
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),
           'tlast', string.format('%.17g', last))
return {string.format('%.17g', tokens), took}
"""

# KEYS: holders, state
# ARGV: now
# Returns {inflight, f1, v1, ...}: the live permits and the state hash.
SNAPSHOT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]))
local out = {tostring(redis.call('ZCARD', KEYS[1]))}
for _, v in ipairs(redis.call('HGETALL', KEYS[2])) do out[#out + 1] = v end
return out
"""
