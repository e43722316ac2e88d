"""Where a Redis session's data lives: key names and the Lua scripts that write them.

Keys of one session (``P`` = key prefix, ``T`` = the session id with ``%``, ``{`` and ``}``
percent-escaped, so the hash tag is exactly ``T`` and two ids never share keys)::

    P:{T}:items   sorted set; score = sequence number, member = "<seq>:<item JSON>"
    P:{T}:meta    hash; "seq" = the highest number ever assigned (kept by ``clear_session``);
                  "created_ms", "updated_ms" = server time in ms of the first and latest write

Both keys share the hash tag: one Cluster slot, so a script may touch both. Numbers start at
1, except in a session written with an expiry (it may expire and start again): its first
number is the server's clock in microseconds (about 1.8e15, exact in a score). See
docs/redis.md.
"""

from __future__ import annotations

import hashlib
from typing import Any

from redis.exceptions import NoScriptError

ITEMS_TYPE = "zset"
META_TYPE = "hash"

# Lua functions; a script gets those it calls, directly or not (each after what it calls).
_LIB = """
local function counter(meta, target)  -- the counter of meta (0: none), whether set; or CORRUPT
  local raw = redis.call('HGET', meta, 'seq')
  local last = tonumber(raw or 0)
  if not last or last < 0 or last ~= math.floor(last) or last >= 2^53 then
    return redis.error_reply('CORRUPT the field seq of ' .. meta .. ' holds ' ..
      string.sub(raw, 1, 40) .. ', not a sequence number; nothing was ' .. target)
  end
  return last, raw ~= false
end
local function expiry_error(key, ttl)
  -- Sets key's expiry to ttl ms (text, never a rounded double; '0': none); returns an
  -- EXPIRYRANGE error, having changed nothing, if it is past Redis's range.
  if ttl == '0' then return nil end
  local checked = redis.pcall('PEXPIRE', key, ttl)
  if type(checked) == 'table' and checked.err then
    return redis.error_reply('EXPIRYRANGE ttl of ' .. ttl ..
      ' ms from now is past the end of the expiry range of Redis; nothing was changed')
  end
end
local function expire(key, ttl)
  if ttl ~= '0' then redis.call('PEXPIRE', key, ttl) end
end
local function newest(items, last)  -- max(last, the highest score in items)
  local top = redis.call('ZRANGE', items, -1, -1, 'WITHSCORES')
  if top[2] and tonumber(top[2]) > last then return tonumber(top[2]) end
  return last
end
local function holds(items, expected)  -- whether items's newest number is expected ('': none)
  return newest(items, -1) == (expected == '' and -1 or tonumber(expected))
end
local function zadd(items, args)  -- unpack() has a stack limit; a wrong type fails the first
  for i = 1, #args, 1000 do
    redis.call('ZADD', items, unpack(args, i, math.min(i + 999, #args)))
  end
end
"""
_FUNCTIONS = {f.split("(")[0]: "local function " + f for f in _LIB.split("local function ")[1:]}


def escape_session_id(session_id: str) -> str:
    """Return ``session_id`` with ``%``, ``{`` and ``}`` percent-escaped (reversible)."""
    return session_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def unescape_session_id(tag: str) -> str:
    """Invert :func:`escape_session_id`."""
    return tag.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


def check_key_prefix(key_prefix: Any) -> str:
    """Return ``key_prefix`` if usable, else raise ValueError saying why."""
    if not isinstance(key_prefix, str) or not key_prefix:
        raise ValueError(f"key_prefix must be a non-empty str, got {key_prefix!r}")
    if "{" in key_prefix or "}" in key_prefix:
        raise ValueError(
            f"key_prefix must not contain '{{' or '}}' (Redis Cluster would take the hash tag "
            f"from it and put unrelated sessions in one slot), got {key_prefix!r}"
        )
    return key_prefix


def session_keys(key_prefix: str, session_id: str) -> tuple[str, str]:
    """Return the (items, meta) key names of ``session_id``."""
    base = f"{key_prefix}:{{{escape_session_id(session_id)}}}"
    return f"{base}:items", f"{base}:meta"


class Script:
    """A Lua script (after the functions it calls) run by EVALSHA, falling back to EVAL on
    NOSCRIPT; unlike redis-py's ``register_script`` it works alike on ``Redis`` and
    ``RedisCluster`` without a client."""

    def __init__(self, source: str) -> None:
        for name, text in reversed(_FUNCTIONS.items()):
            if f"{name}(" in source:
                source = text + source
        self.source = source
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def __call__(self, client: Any, keys: tuple[str, ...], *args: Any) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            # NOSCRIPT is raised before anything runs, so running it again cannot repeat a write.
            return await client.eval(self.source, len(keys), *keys, *args)


# prepare(): the last number used and whether there was no counter (or an error reply), having
# set meta's expiry; without a counter the highest score decides, so numbers are never reused.
# With one the items key is read only before the expiry check writes (else the first ZADD
# checks its type), so the common append makes four calls: HGET, TIME, ZADD, HSET.
# write(): ARGV[first .. first + n - 1] as items ``last + 1`` on, with counter, times and
# expiry; returns the last number.
_WRITE = """
local clock = redis.call('TIME')
local function prepare(items, meta, ttl)
  local last, set = counter(meta, 'written')
  if type(last) == 'table' then return last end
  if not set or ttl ~= '0' then last = newest(items, last) end
  local e = expiry_error(meta, ttl)
  if e then return e end
  if last == 0 and ttl ~= '0' then
    -- An expiring session may have expired before: start above any number it can have used.
    last = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  end
  return last, not set
end
local function write(items, meta, ttl, last, fresh, first, n)
  local args = {}
  for i = 1, n do
    args[2 * i - 1] = last + i
    args[2 * i] = string.format('%d', last + i) .. ':' .. ARGV[first + i - 1]  -- never '1e+14'
  end
  zadd(items, args)
  local ms = string.format('%d', tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))
  redis.call('HSET', meta, 'seq', string.format('%d', last + n), 'updated_ms', ms)
  if fresh then redis.call('HSETNX', meta, 'created_ms', ms) end
  expire(items, ttl)
  -- a counter means the meta hash existed, so the expiry check already set its expiry
  if fresh then expire(meta, ttl) end
  return last + n
end
local function append(first)  -- write ARGV[first..] to KEYS[1], KEYS[2] with expiry ARGV[1]
  local last, fresh = prepare(KEYS[1], KEYS[2], ARGV[1])
  if type(last) == 'table' then return last end
  return write(KEYS[1], KEYS[2], ARGV[1], last, fresh, first, #ARGV - first + 1)
end
"""

# Unless said otherwise, KEYS: items, meta; ARGV[1]: the expiry in ms ("0": leave it alone).
APPEND = Script(_WRITE + "return append(2)\n")

# KEYS: items, meta, guard items. ARGV[2]: the guard's expected newest number ('' for none);
# ARGV[3..]: item JSON. APPEND while the guard is unchanged; else -1 (nothing written).
APPEND_IF_NEWEST = Script(
    _WRITE + "if not holds(KEYS[3], ARGV[2]) then return -1 end\nreturn append(3)\n"
)

# KEYS and ARGV[2] as APPEND_IF_NEWEST; ARGV[3]: the items' own expected newest number ('*':
# any). POP while both are as expected: {1, the popped member (absent when empty)}; else {0}.
POP_IF_NEWEST = Script(
    """
if not holds(KEYS[3], ARGV[2]) or (ARGV[3] ~= '*' and not holds(KEYS[1], ARGV[3])) then
  return {0}
end
local e = expiry_error(KEYS[2], ARGV[1])
if e then return e end
local popped = redis.call('ZPOPMAX', KEYS[1])
expire(KEYS[1], ARGV[1])
return {1, popped[1]}
"""
)

POP = Script(
    """
local e = expiry_error(KEYS[2], ARGV[1])
if e then return e end
local popped = redis.call('ZPOPMAX', KEYS[1])
expire(KEYS[1], ARGV[1])
return popped[1]
"""
)

# The SDK compaction hook's swap. ARGV[2]: n newest members expected (-1: replace all);
# ARGV[3]: p oldest members to prune; then those n members (oldest first), the p members and
# the new items' JSON. Unless the members are exactly those, changes nothing and returns -1;
# else deletes them and appends the new items as APPEND does.
REPLACE = Script(
    _WRITE
    + """
local items, n, p = KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local last, fresh = prepare(items, KEYS[2], ARGV[1])
if type(last) == 'table' then return last end
if n < 0 then
  redis.call('DEL', items)
else
  if redis.call('ZCARD', items) < n + p then return -1 end
  local current = redis.call('ZRANGE', items, -n, -1)
  for i = 1, n do
    if current[i] ~= ARGV[3 + i] then return -1 end
  end
  if p > 0 then
    local oldest = redis.call('ZRANGE', items, 0, p - 1)
    for i = 1, p do
      if oldest[i] ~= ARGV[3 + n + i] then return -1 end
    end
    redis.call('ZREMRANGEBYRANK', items, 0, p - 1)
  end
  if n > 0 then redis.call('ZREMRANGEBYRANK', items, -n, -1) end
end
local first = 4 + math.max(n, 0) + p
return write(items, KEYS[2], ARGV[1], last, fresh, first, #ARGV - first + 1)
"""
)

# KEYS: (items, meta) of each batch; then, to list a side store in its family's registry
# first, the registry's. ARGV[1]: the number of batches; per batch its expiry, item count and
# items; then the listed batch's number, the registry's expiry, the entry and the purpose
# (listed unless the side store holds items or an entry names it). Every key is checked
# before anything is written. Returns each batch's last number.
FAMILY_APPEND = Script(
    _WRITE
    + """
local planned = {}
local function plan(items, meta, ttl, count)
  local kind = redis.call('TYPE', items)['ok']
  if kind ~= 'none' and kind ~= '"""
    + ITEMS_TYPE
    + """' then
    return redis.error_reply('WRONGTYPE ' .. items .. ' holds a ' .. kind ..
      '; nothing was written')
  end
  if planned[items] then
    planned[items] = planned[items] + count
    return {planned[items] - count, false}
  end
  local last, fresh = prepare(items, meta, ttl)
  if type(last) == 'table' then return last end
  planned[items] = last + count
  return {last, fresh}
end
local function listed(items, purpose)
  for _, member in ipairs(redis.call('ZRANGE', items, 0, -1)) do
    local at = string.find(member, ':', 1, true)
    if at then
      local ok, record = pcall(cjson.decode, string.sub(member, at + 1))
      if ok and type(record) == 'table' and record['purpose'] == purpose then return true end
    end
  end
  return false
end
local n = tonumber(ARGV[1])
local plans, pos = {}, 2
local register = nil
if #KEYS > 2 * n then
  local rttl = ARGV[#ARGV - 2]
  local member = KEYS[2 * tonumber(ARGV[#ARGV - 3]) - 1]
  if redis.call('EXISTS', member) == 0 and not listed(KEYS[2 * n + 1], ARGV[#ARGV]) then
    local p = plan(KEYS[2 * n + 1], KEYS[2 * n + 2], rttl, 1)
    if p.err then return p end
    register = {p[1], p[2], rttl}
  end
end
for b = 1, n do
  local ttl, count = ARGV[pos], tonumber(ARGV[pos + 1])
  local p = plan(KEYS[2 * b - 1], KEYS[2 * b], ttl, count)
  if p.err then return p end
  plans[b] = {p[1], p[2], ttl, pos + 2, count}
  pos = pos + 2 + count
end
if register then
  write(KEYS[2 * n + 1], KEYS[2 * n + 2], register[3], register[1], register[2], #ARGV - 1, 1)
end
local out = {}
for b = 1, n do
  local plan = plans[b]
  out[b] = write(KEYS[2 * b - 1], KEYS[2 * b], plan[3], plan[1], plan[2], plan[4], plan[5])
end
return out
"""
)

# Pops the newest member only if it is exactly ARGV[2]: {2, member, the new newest (if any)};
# {1, newest} when it is another (nothing changed); {0} when there is none.
POP_IF = Script(
    """
local top = redis.call('ZRANGE', KEYS[1], -1, -1)
if not top[1] then return {0} end
if top[1] ~= ARGV[2] then return {1, top[1]} end
local e = expiry_error(KEYS[2], ARGV[1])
if e then return e end
redis.call('ZREM', KEYS[1], top[1])
expire(KEYS[1], ARGV[1])
return {2, top[1], redis.call('ZRANGE', KEYS[1], -1, -1)[1]}
"""
)

# Deletes the items but keeps the counter (raised to the highest score, in case the meta hash
# was lost). Refuses when a key holds another type: that value is not ours to delete.
CLEAR = Script(
    f"""
local expected = {{'{ITEMS_TYPE}', '{META_TYPE}'}}
for i = 1, 2 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= expected[i] then
    return redis.error_reply('WRONGTYPE a key of the session holds a ' .. t ..
      ', not a ' .. expected[i] .. '; nothing was deleted')
  end
end
local last = counter(KEYS[2], 'deleted')
if type(last) == 'table' then return last end
last = newest(KEYS[1], last)
local e = expiry_error(KEYS[2], ARGV[1])
if e then return e end
local deleted = redis.call('DEL', KEYS[1])
if last > 0 then
  redis.call('HSET', KEYS[2], 'seq', string.format('%d', last))
  expire(KEYS[2], ARGV[1])
end
return deleted
"""
)

# ARGV: seq1, json1, seq2, json2, ... (no expiry). Replaces each member still scored seq by
# "<seq>:<json>"; returns how many were replaced.
REWRITE = Script(
    """
local replaced = 0
for i = 1, #ARGV, 2 do
  local seq = ARGV[i]
  if redis.call('ZREMRANGEBYSCORE', KEYS[1], seq, seq) > 0 then
    redis.call('ZADD', KEYS[1], seq, seq .. ':' .. ARGV[i + 1])
    replaced = replaced + 1
  end
end
return replaced
"""
)

# ARGV[2], ARGV[3]: created and updated times in ms; ARGV[4..]: seq1, json1, ... (increasing).
# Unless the session holds items (returns how many), stores each at its number, raises the
# counter to the last and sets the times; returns 0.
WRITE_AT = Script(
    """
local items, meta = KEYS[1], KEYS[2]
local held = redis.call('ZCARD', items)
if held > 0 then return held end
local last = counter(meta, 'written')
if type(last) == 'table' then return last end
local e = expiry_error(meta, ARGV[1])
if e then return e end
local args = {}
for i = 4, #ARGV, 2 do
  args[#args + 1] = ARGV[i]
  args[#args + 1] = ARGV[i] .. ':' .. ARGV[i + 1]
end
zadd(items, args)
last = math.max(last, tonumber(ARGV[#ARGV - 1]))
redis.call('HSET', meta, 'seq', string.format('%d', last), 'created_ms', ARGV[2],
  'updated_ms', ARGV[3])
expire(items, ARGV[1])
expire(meta, ARGV[1])
return 0
"""
)

TOUCH = Script(
    """
local e = expiry_error(KEYS[2], ARGV[1])
if e then return e end
expire(KEYS[1], ARGV[1])
return 1
"""
)
