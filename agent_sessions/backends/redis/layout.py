"""Where a Redis session's data lives: key names and the Lua scripts that write them.

Keys of one session (``P`` = key prefix, ``T`` = the session id with ``%``, ``{`` and ``}``
percent-escaped)::

    P:{T}:items   sorted set; score = sequence number, member = "<seq>:<item JSON>"
    P:{T}:meta    hash; field "seq" = the highest sequence number ever assigned (it survives
                  ``clear_session``, so numbers are never reused and a range delete computed
                  before a clear cannot reach items written after it); "created_ms" and
                  "updated_ms" = server time in ms of the first and the latest ``add_items``
                  (read by the session catalog)

Numbers start at 1, except in a session written with an expiry: its keys may expire together
and the session start again, so its first number is then the server's clock in microseconds
(about 1.8e15, exact in a score up to 2**53), above any number a previous incarnation used
unless it wrote more than a million items per second of its life.

Both keys carry the hash tag ``{T}``, so a session lives in one Redis Cluster slot and every
script may touch all of its keys. ``T`` holds no brace, so the tag is exactly ``T`` whatever the
id contains, and the escape is reversible, so two ids never share keys. The prefix may not hold
braces either (Redis would take the tag from it).

Why a sorted set: its score gives reads by sequence number (``after``/``before``) in
O(log n + result), the newest N by rank in O(log n + N), and an atomic ZPOPMAX; a list can do
the last two but not the first. Measured against a list with the same scripts (Redis 7.0,
loopback, 100k items of ~160 bytes) add, get(limit=20) and pop took the same time within noise;
the sorted set costs ~90 bytes more per item (280 vs 190). The member starts with its sequence
number only to keep equal items distinct.

What this costs a write, in server time (Redis 7.0 INFO commandstats, ~200-byte items, a loaded
2-core machine, so absolute numbers are inflated): a bare RPUSH takes 3-4 us for 1 item; APPEND
~40 us, of which its four calls (HGET, TIME, ZADD, HSET) are ~10 us and the script around them
the rest; a script that only RPUSHes takes ~13 us. End to end on loopback that is ~0.75-0.8x a
raw RPUSH (1 item) against ~0.86x for the RPUSH-only script, the floor of any scripted add.
``benchmarks/redis_layouts.py`` measures the alternatives (a list numbered by a script, Lua-free
transactions, a stream); none that keeps the contract gets add above that floor (see
docs/redis.md).
"""

from __future__ import annotations

import hashlib
from typing import Any

from redis.exceptions import NoScriptError

ITEMS_TYPE = "zset"
META_TYPE = "hash"


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
    """A Lua script run by EVALSHA, falling back to EVAL (which also caches it) on NOSCRIPT.

    Unlike redis-py's ``register_script`` this needs no client at definition time and works
    the same on ``Redis`` and ``RedisCluster``.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, client: Any, keys: tuple[str, ...], *args: Any) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            # NOSCRIPT is raised before anything runs, so running it again cannot repeat a write.
            return await client.eval(self.source, len(keys), *keys, *args)


def _read_counter(meta: str, target: str) -> str:
    """Lua that sets ``last`` to the counter in the hash ``meta`` (0 when absent) and refuses
    with a ``CORRUPT`` error, changing nothing, when the field is not a sequence number."""
    return f"""
local raw = redis.call('HGET', {meta}, 'seq')
local last = 0
if raw then
  last = tonumber(raw)
  if not last or last < 0 or last ~= math.floor(last) or last >= 2^53 then
    return redis.error_reply('CORRUPT the field seq of ' .. {meta} .. ' holds ' ..
      string.sub(raw, 1, 40) .. ', not a sequence number; nothing was {target}')
  end
end
"""

def _check_expiry(key: str, ttl: str) -> str:
    """Lua that refuses with an ``EXPIRYRANGE`` error, changing nothing, when the server's
    time plus the expiry ``ttl`` (ms, as text) is past Redis's range. The exact integer text is
    handed to PEXPIRE (never a Lua double, which would round it), and PEXPIRE checks the range
    before it looks at the key; ``key`` is a key that gets this expiry anyway."""
    return f"""
if {ttl} ~= '0' then
  local checked = redis.pcall('PEXPIRE', {key}, {ttl})
  if type(checked) == 'table' and checked.err then
    return redis.error_reply('EXPIRYRANGE ttl of ' .. {ttl} ..
      ' ms from now is past the end of the expiry range of Redis; nothing was changed')
  end
end
"""


def _prepare_write() -> str:
    """Lua that reads the counter into ``last`` and checks the expiry in ARGV[1].

    Without a counter (a new session, or a meta hash that was lost: evicted, deleted) the
    highest score decides, so numbers are never reused. With one, the items key is not read:
    the first ZADD checks its type before anything is written, except when an expiry is set
    (its check writes), where the read comes first. Every call Lua makes costs server time,
    so the common append makes four: HGET, TIME, ZADD, HSET."""
    return (
        """
local items, meta = KEYS[1], KEYS[2]
"""
        + _read_counter("meta", "written")
        + """
local fresh = not raw
if fresh or ARGV[1] ~= '0' then
  local top = redis.call('ZRANGE', items, -1, -1, 'WITHSCORES')
  if top[2] and tonumber(top[2]) > last then last = tonumber(top[2]) end
end
"""
        + _check_expiry("meta", "ARGV[1]")
        + """
local ttl = tonumber(ARGV[1])
local clock = redis.call('TIME')
if last == 0 and ttl > 0 then
  -- An expiring session may have expired before: start above any number it can have used.
  last = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
end
"""
    )


_WRITE = """
local function write(items, meta, ttl, last, fresh, first, n)
  local args, k = {}, 0
  for i = 1, n do
    local seq = last + i
    args[k + 1] = seq
    args[k + 2] = string.format('%d', seq) .. ':' .. ARGV[first + i - 1]  -- never '1e+14'
    k = k + 2
    if k >= 1000 then  -- unpack() has a stack limit; the first ZADD already checked the type
      redis.call('ZADD', items, unpack(args))
      args, k = {}, 0
    end
  end
  if k > 0 then redis.call('ZADD', items, unpack(args)) end
  local ms = string.format('%d', tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))
  redis.call('HSET', meta, 'seq', string.format('%d', last + n), 'updated_ms', ms)
  if fresh then redis.call('HSETNX', meta, 'created_ms', ms) end
  if ttl ~= '0' then
    redis.call('PEXPIRE', items, ttl)
    -- a counter means the meta hash existed, so the expiry check already set its expiry
    if fresh then redis.call('PEXPIRE', meta, ttl) end
  end
  return last + n
end
"""
"""Lua defining ``write(items, meta, ttl, last, fresh, first, n)``: stores ARGV[first ..
first + n - 1] as the items numbered ``last + 1`` on, records the new counter and times in the
meta hash, sets the expiry ``ttl`` (ms as text, '0': none) and returns the last number. Needs
``clock`` (the server's TIME) in scope."""


def _write_items(first: str) -> str:
    """Lua that stores ARGV[first..] as the items numbered ``last + 1`` on (see ``_WRITE``),
    with the expiry in ARGV[1], and returns the last number."""
    count = f"#ARGV - ({first}) + 1"
    return _WRITE + f"return write(items, meta, ARGV[1], last, fresh, {first}, {count})\n"


# KEYS: items, meta. ARGV[1]: expiry in ms ("0" = leave expiry alone); ARGV[2..]: item JSON.
APPEND = Script(_prepare_write() + _write_items("2"))

def _pop_newest() -> str:
    """Lua that pops the newest member of KEYS[1] into ``popped`` (a ZPOPMAX reply) after
    checking the expiry in ARGV[1], and gives both keys that expiry."""
    return (
        _check_expiry("KEYS[2]", "ARGV[1]")
        + """
local popped = redis.call('ZPOPMAX', KEYS[1])
if ARGV[1] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
"""
    )


def _guard(key: str, expected: str) -> str:
    """Lua that returns ``refused`` unless the newest score of ``key`` is ``expected`` (a
    sequence number as text; '' for an empty ``key``): another session of the family (a
    layer's log) has not moved since the caller last read it."""
    return f"""
local guard = redis.call('ZRANGE', {key}, -1, -1, 'WITHSCORES')
if (guard[2] and tonumber(guard[2]) or -1) ~= ({expected} == '' and -1 or tonumber({expected})) then
  return refused
end
"""


# KEYS: items, meta, guard items. ARGV[1]: expiry in ms or "0"; ARGV[2]: the guard's expected
# newest number ('' for none); ARGV[3..]: item JSON. APPEND only while the guard is unchanged;
# -1 (nothing written) otherwise.
APPEND_IF_NEWEST = Script(
    "local refused = -1\n" + _guard("KEYS[3]", "ARGV[2]") + _prepare_write() + _write_items("3")
)

# KEYS: items, meta, guard items. ARGV[1]: expiry in ms or "0"; ARGV[2]: the guard's expected
# newest number ('' for none); ARGV[3]: the items' own expected newest number ('*': any). POP
# only while both are as expected: {1, the popped member (absent when empty)}; {0} (nothing
# changed) otherwise.
POP_IF_NEWEST = Script(
    "local refused = {0}\n"
    + _guard("KEYS[3]", "ARGV[2]")
    + "if ARGV[3] ~= '*' then\n"
    + _guard("KEYS[1]", "ARGV[3]")
    + "end\n"
    + _pop_newest()
    + "return {1, popped[1]}\n"
)

# KEYS: items, meta. ARGV[1]: expiry in ms or "0"; ARGV[2]: n, the number of newest members
# expected (-1: replace everything); ARGV[3]: p, the number of oldest members to prune;
# ARGV[4..3+n]: the expected newest members, oldest first; then the p members to prune; then
# the new items' JSON. Unless the newest n members and the oldest p are exactly those, changes
# nothing and returns -1; else deletes them and appends the new items like APPEND (new numbers,
# so none is reused). One script: the SDK compaction hook's atomic swap.
REPLACE = Script(
    _prepare_write()
    + """
local n, p = tonumber(ARGV[2]), tonumber(ARGV[3])
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
"""
    + _write_items("first")
)

# KEYS: (items, meta) of each batch, in order; then, when a side store is to be listed in its
# family's registry first, the registry's (items, meta). ARGV[1]: the number of batches; then
# per batch: its expiry in ms or "0", its item count and its item JSONs; then, for the
# registry: the number of the side store's batch, the registry's expiry, the entry's JSON and
# the purpose. Appends every batch as APPEND would (a session may come twice), after listing
# the purpose unless the side store holds items (it was listed before its first write) or an
# entry already names it.
# Every key is checked before anything is written, so a refusal (WRONGTYPE, CORRUPT,
# EXPIRYRANGE) writes nothing. Returns each batch's last number. One script: the TTL layer's
# lifecycle record and its items in one step (see ``RedisSession._append_family``).
FAMILY_APPEND = Script(
    """
local clock = redis.call('TIME')
local planned = {}
local function prepare(items, meta, ttl, count)
  local kind = redis.call('TYPE', items)['ok']
  if kind ~= 'none' and kind ~= '"""
    + ITEMS_TYPE
    + """' then
    return redis.error_reply('WRONGTYPE ' .. items .. ' holds a ' .. kind ..
      '; nothing was written')
  end
  if planned[items] then
    local start = planned[items]
    planned[items] = start + count
    return {start, false}
  end
"""
    + _read_counter("meta", "written")
    + """
  local fresh = not raw
  if fresh then  -- with a counter, TYPE above already checked the items key
    local top = redis.call('ZRANGE', items, -1, -1, 'WITHSCORES')
    if top[2] and tonumber(top[2]) > last then last = tonumber(top[2]) end
  end
"""
    + _check_expiry("meta", "ttl")
    + """
  if last == 0 and ttl ~= '0' then
    last = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  end
  planned[items] = last + count
  return {last, fresh}
end
"""
    + _WRITE
    + """local function listed(items, purpose)
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
    local p = prepare(KEYS[2 * n + 1], KEYS[2 * n + 2], rttl, 1)
    if p.err then return p end
    register = {p[1], p[2], rttl}
  end
end
for b = 1, n do
  local ttl, count = ARGV[pos], tonumber(ARGV[pos + 1])
  local p = prepare(KEYS[2 * b - 1], KEYS[2 * b], ttl, count)
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

# KEYS: items, meta. ARGV[1]: expiry in ms or "0"; ARGV[2]: the member expected newest.
# Pops the newest member only if it is exactly ARGV[2]: returns {2, member, the new newest
# member (absent when none is left)} when popped, {1, newest} when the newest is another one
# (nothing changed), {0} when there is none.
POP_IF = Script(
    """
local top = redis.call('ZRANGE', KEYS[1], -1, -1)
if not top[1] then return {0} end
if top[1] ~= ARGV[2] then return {1, top[1]} end
"""
    + _check_expiry("KEYS[2]", "ARGV[1]")
    + """
redis.call('ZREM', KEYS[1], top[1])
if ARGV[1] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return {2, top[1], redis.call('ZRANGE', KEYS[1], -1, -1)[1]}
"""
)

# KEYS: items, meta. ARGV[1]: expiry in ms or "0". Returns the newest member or nil.
POP = Script(_pop_newest() + "return popped[1]\n")

# KEYS: items, meta. ARGV[1]: expiry in ms ("0" = leave expiry alone). Deletes the items but
# keeps the counter (recording the highest score too, in case the meta hash was lost), so
# numbering continues after a clear; the kept hash gets the sliding expiry like any write.
# Refuses (deleting nothing) when either key holds a value of another type: that value is not
# ours to delete.
CLEAR = Script(
    """
local expected = {'"""
    + ITEMS_TYPE
    + """', '"""
    + META_TYPE
    + """'}
for i = 1, 2 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= expected[i] then
    return redis.error_reply('WRONGTYPE a key of the session holds a ' .. t ..
      ', not a ' .. expected[i] .. '; nothing was deleted')
  end
end
"""
    + _read_counter("KEYS[2]", "deleted")
    + """
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) > last then last = tonumber(top[2]) end
"""
    + _check_expiry("KEYS[2]", "ARGV[1]")
    + """
local deleted = redis.call('DEL', KEYS[1])
if last > 0 then
  redis.call('HSET', KEYS[2], 'seq', string.format('%d', last))
  if ARGV[1] ~= '0' then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end
end
return deleted
"""
)

# KEYS: items, meta. ARGV: seq1, json1, seq2, json2, ... Replaces each existing member scored
# seq by "<seq>:<json>" (same score, so numbering is unchanged); skips numbers no longer
# stored. One script, so the whole rewrite is atomic. Expiry is left alone. Returns how many
# members were replaced.
REWRITE = Script(
    """
local items = KEYS[1]
local replaced = 0
for i = 1, #ARGV, 2 do
  local seq = ARGV[i]
  if #redis.call('ZRANGEBYSCORE', items, seq, seq) > 0 then
    redis.call('ZREMRANGEBYSCORE', items, seq, seq)
    redis.call('ZADD', items, seq, seq .. ':' .. ARGV[i + 1])
    replaced = replaced + 1
  end
end
return replaced
"""
)

# KEYS: items, meta. ARGV[1]: expiry in ms ("0": none), ARGV[2], ARGV[3]: created and updated
# times in ms; ARGV[4..]: seq1, json1, seq2, json2, ... (increasing). Refuses with HELD when
# the session holds items; else stores each item at its number, raises the counter to the last
# (never lowers it) and sets the times. Returns the number of items held (0: written).
WRITE_AT = Script(
    """
local items, meta = KEYS[1], KEYS[2]
local held = redis.call('ZCARD', items)
if held > 0 then return held end
"""
    + _read_counter("meta", "written")
    + _check_expiry("meta", "ARGV[1]")
    + """
local args = {}
for i = 4, #ARGV, 2 do
  args[#args + 1] = ARGV[i]
  args[#args + 1] = ARGV[i] .. ':' .. ARGV[i + 1]
  if #args >= 1000 then
    redis.call('ZADD', items, unpack(args))
    args = {}
  end
end
if #args > 0 then redis.call('ZADD', items, unpack(args)) end
local top = tonumber(ARGV[#ARGV - 1])
if top > last then last = top end
redis.call('HSET', meta, 'seq', string.format('%d', last), 'created_ms', ARGV[2],
  'updated_ms', ARGV[3])
if ARGV[1] ~= '0' then
  redis.call('PEXPIRE', items, ARGV[1])
  redis.call('PEXPIRE', meta, ARGV[1])
end
return 0
"""
)

# KEYS: items, meta. ARGV[1]: expiry in ms. Sets both keys (those that exist) to expire then.
TOUCH = Script(
    _check_expiry("KEYS[2]", "ARGV[1]")
    + """
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
"""
)
