"""How ``RedisStore`` lays state out in Redis: the Lua scripts and the decoders of their data.

Each script is one read-check-write, atomic inside Redis.

Redis runs a script to the end before it serves another command, so a compare-and-set
here cannot interleave with another worker's. Numbers that must round-trip exactly
(timestamps) travel as the strings Python wrote (``repr``) or as ``%.17g``, never through
Lua's default 14-digit formatting.

A session is one hash: ``v`` version, ``d`` JSON data, ``c``/``u`` created/updated, ``t``
TTL and ``e`` expiry ("" for none), ``o`` the token of the last write, ``f:NAME`` the
expiry of field NAME. A namespace of records is one hash (key -> "version\\nupdated\\n
token\\nJSON") plus a sorted set of its keys for ordered prefix scans.

The write token lets a write that is sent again after a lost reply recognise itself
("again") instead of reporting a conflict with its own first attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ._contract import Record, Snapshot, live_fields
from ._json import decode_document, freeze_mapping

__all__ = [
    "CREATE",
    "DELETE",
    "GC_FIELDS",
    "GC_SESSIONS",
    "PUT",
    "RECORD_DELETE",
    "RECORD_LIST",
    "RECORD_PUT",
    "RECORD_PUT_FENCED",
    "TOUCH",
    "pairs",
    "redact_url",
    "session_snapshot",
    "stored_record",
]

# KEYS: session, expiry index, field-expiry index
# ARGV: id, now, data, ttl|"", expires_at|"", native expiry ms|"", token
CREATE = """
local e = redis.call('HGET', KEYS[1], 'e')
if e then
  if redis.call('HGET', KEYS[1], 'o') == ARGV[7] then return 'again' end
  if e == '' or tonumber(ARGV[2]) < tonumber(e) then return 'exists' end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', '1', 'd', ARGV[3], 'c', ARGV[2], 'u', ARGV[2],
           't', ARGV[4], 'e', ARGV[5], 'o', ARGV[7])
if ARGV[5] ~= '' then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
redis.call('ZREM', KEYS[3], ARGV[1])
return 'ok'
"""

# KEYS: session, field-expiry index, then (namespace hash, namespace index) per record
# ARGV: id, now, expected version, data, token, n, n top-level names, m, m (name,
# expires_at) pairs, then (key, JSON value) per record: records written unconditionally,
# in the same atomic step, only if the put succeeds (``put_with_records``).
# Returns {'ok', f1, v1, ...} (the hash without its data) or {'missing'|'expired'|'stale'|
# 'again', detail}.
PUT = """
local h = redis.call('HMGET', KEYS[1], 'v', 'e', 'o')
if not h[1] then return {'missing', ''} end
if h[3] == ARGV[5] then return {'again', h[1]} end
local now = tonumber(ARGV[2])
if h[2] ~= '' and now >= tonumber(h[2]) then return {'expired', h[2]} end
if h[1] ~= ARGV[3] then return {'stale', h[1]} end
local n = tonumber(ARGV[6])
local present = {}
for i = 7, 6 + n do present[ARGV[i]] = true end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 2) == 'f:' then
    if not present[string.sub(f, 3)] or tonumber(all[i + 1]) <= now then
      redis.call('HDEL', KEYS[1], f)
    end
  end
end
local m = tonumber(ARGV[7 + n])
for i = 8 + n, 7 + n + 2 * m, 2 do
  redis.call('HSET', KEYS[1], 'f:' .. ARGV[i], ARGV[i + 1])
end
local r = 8 + n + 2 * m
for k = 3, #KEYS, 2 do
  local key, old = ARGV[r], redis.call('HGET', KEYS[k], ARGV[r])
  local version = 1
  if old then version = tonumber(string.match(old, '^(%d+)\\n')) + 1 end
  redis.call('HSET', KEYS[k], key,
             tostring(version) .. '\\n' .. ARGV[2] .. '\\n' .. ARGV[5] .. '\\n' .. ARGV[r + 1])
  redis.call('ZADD', KEYS[k + 1], 0, key)
  r = r + 2
end
local v = tostring(tonumber(h[1]) + 1)
redis.call('HSET', KEYS[1], 'v', v, 'd', ARGV[4], 'u', ARGV[2], 'o', ARGV[5])
local out = {'ok'}
local next_at, next_text = nil, nil
all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f = all[i]
  if f ~= 'd' then
    out[#out + 1] = f
    out[#out + 1] = all[i + 1]
    if string.sub(f, 1, 2) == 'f:' then
      local at = tonumber(all[i + 1])
      if next_at == nil or at < next_at then next_at, next_text = at, all[i + 1] end
    end
  end
end
if next_text then
  redis.call('ZADD', KEYS[2], next_text, ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return out
"""

# KEYS: session, expiry index
# ARGV: id, now, ttl|"" (keep the stored one), native expiry grace ms
TOUCH = """
local h = redis.call('HMGET', KEYS[1], 'v', 'e', 't')
if not h[1] then return {'missing', ''} end
local now = tonumber(ARGV[2])
if h[2] ~= '' and now >= tonumber(h[2]) then return {'expired', h[2]} end
local ttl = ARGV[3]
if ttl == '' then ttl = h[3] end
if ttl == '' then
  redis.call('HSET', KEYS[1], 't', '', 'e', '')
  redis.call('PERSIST', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  local seconds = tonumber(ttl)
  local at = string.format('%.17g', now + seconds)
  local ms = math.min(math.ceil(seconds * 1000) + tonumber(ARGV[4]), 1e14)
  redis.call('HSET', KEYS[1], 't', ttl, 'e', at)
  redis.call('PEXPIRE', KEYS[1], string.format('%d', ms))
  redis.call('ZADD', KEYS[2], at, ARGV[1])
end
local out = {'ok'}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all do out[#out + 1] = all[i] end
return out
"""

# KEYS: session, expiry index, field-expiry index
# ARGV: id, now.  Returns 1 if a live session was removed.
DELETE = """
local e = redis.call('HGET', KEYS[1], 'e')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if not e then return 0 end
redis.call('DEL', KEYS[1])
if e ~= '' and tonumber(ARGV[2]) >= tonumber(e) then return 0 end
return 1
"""

# KEYS: expiry index, field-expiry index
# ARGV: now, session key prefix, batch size.  Returns {removed, looked at}.
# A session Redis already dropped by its native TTL still counts: it expired and no one
# had collected it.
GC_SESSIONS = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
local now = tonumber(ARGV[1])
local n = 0
for _, id in ipairs(ids) do
  local key = ARGV[2] .. id
  local e = redis.call('HGET', key, 'e')
  if (not e) or (e ~= '' and now >= tonumber(e)) then
    if e then redis.call('DEL', key) end
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    n = n + 1
  end
end
return {n, #ids}
"""

# KEYS: session, field-expiry index
# ARGV: id, token read, new token, new data, next field expiry|"", expired names...
# Returns how many fields were dropped, -1 if the session changed since it was read
# (read again), -2 if it is gone.
GC_FIELDS = """
local o = redis.call('HGET', KEYS[1], 'o')
if not o then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return -2
end
if o ~= ARGV[2] then return -1 end
redis.call('HSET', KEYS[1], 'd', ARGV[4], 'o', ARGV[3])
for i = 6, #ARGV do redis.call('HDEL', KEYS[1], 'f:' .. ARGV[i]) end
if ARGV[5] == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
end
return #ARGV - 5
"""

# KEYS: namespace hash, namespace key index
# ARGV: key, expected version|"" (unconditional), now, token, JSON value
RECORD_PUT = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local actual = 0
if old then
  local v, o = string.match(old, '^(%d+)\\n[^\\n]*\\n([^\\n]*)\\n')
  if o == ARGV[4] then return {'again', v} end
  actual = tonumber(v)
end
if ARGV[2] ~= '' and actual ~= tonumber(ARGV[2]) then
  if old then return {'stale', tostring(actual)} end
  return {'stale', ''}
end
local v = tostring(actual + 1)
redis.call('HSET', KEYS[1], ARGV[1], v .. '\\n' .. ARGV[3] .. '\\n' .. ARGV[4] .. '\\n' .. ARGV[5])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return {'ok', v}
"""

# KEYS: namespace hash, namespace key index
# ARGV: key, fence field, expected token, now, write token, JSON value
# A compare-and-set on the fencing token the stored JSON carries (absent: 0), decoded
# here so no other worker's write can land between the check and the write.
RECORD_PUT_FENCED = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local version, actual = 0, 0
if old then
  local v, o, text = string.match(old, '^(%d+)\\n[^\\n]*\\n([^\\n]*)\\n(.*)$')
  if o == ARGV[5] then return {'again', v} end
  version = tonumber(v)
  local t = cjson.decode(text)[ARGV[2]]
  if type(t) == 'number' and t == math.floor(t) then actual = t end
end
if actual ~= tonumber(ARGV[3]) then return {'fenced', string.format('%d', actual)} end
local v = tostring(version + 1)
redis.call('HSET', KEYS[1], ARGV[1], v .. '\\n' .. ARGV[4] .. '\\n' .. ARGV[5] .. '\\n' .. ARGV[6])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return {'ok', v}
"""

# KEYS: namespace hash, namespace key index.  ARGV: key
RECORD_DELETE = """
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
"""

# KEYS: namespace hash, namespace key index
# ARGV: lexicographic min, max.  Returns {key, stored, key, stored, ...} in key order.
RECORD_LIST = """
local keys = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2])
local out = {}
for start = 1, #keys, 500 do
  local batch = {}
  for i = start, math.min(start + 499, #keys) do batch[#batch + 1] = keys[i] end
  local values = redis.call('HMGET', KEYS[1], unpack(batch))
  for i, value in ipairs(values) do
    if value then
      out[#out + 1] = batch[i]
      out[#out + 1] = value
    end
  end
end
return out
"""


def session_snapshot(
    session_id: str, h: Mapping[str, str], now: float, data: dict[str, Any] | None = None
) -> Snapshot:
    """The snapshot a session hash holds at ``now`` (``data``: its already decoded data)."""
    field_expires = {name[2:]: float(at) for name, at in h.items() if name.startswith("f:")}
    live = live_fields(field_expires, now)
    doc: dict[str, Any] = decode_document(h["d"]) if data is None else data
    if len(live) != len(field_expires):
        doc = {k: v for k, v in doc.items() if k in live or k not in field_expires}
    return Snapshot(
        session_id=session_id,
        version=int(h["v"]),
        data=freeze_mapping(doc),
        created_at=float(h["c"]),
        updated_at=float(h["u"]),
        expires_at=float(h["e"]) if h["e"] else None,
        field_expires_at=MappingProxyType(live),
    )


def pairs(flat: list[str]) -> dict[str, str]:
    """``[k1, v1, k2, v2]`` as a dict, as HGETALL-style replies come back from scripts."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def stored_record(namespace: str, key: str, stored: str) -> Record:
    """The record a stored "version\\nupdated\\ntoken\\nJSON" value holds."""
    version, updated_at, _token, text = stored.split("\n", 3)
    return Record(
        namespace=namespace,
        key=key,
        version=int(version),
        value=freeze_mapping(decode_document(text)),
        updated_at=float(updated_at),
    )


def redact_url(url: str) -> str:
    """The URL without its password, fit for error messages and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable redis URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
