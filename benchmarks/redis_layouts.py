"""Redis storage layouts for a session, measured against raw RPUSH/RPOP/LRANGE in one run.

    python benchmarks/redis_layouts.py [--calls 1000] [--repeat 3] [--size 10000]

Not part of ``make bench``: it answers one question (issue 15): can another layout that keeps
the layer contract (per-item sequence numbers never reused, reads by sequence number, atomic
batches, atomic pop, range delete, rewrite in place) bring ``add`` to >= 0.8x a raw RPUSH?

Contenders (prototypes share raw's JSON codec, so only the layout differs):

* ``raw``: raw.RawRedisList (one list, RPUSH / RPOP / LRANGE); the baseline of every ratio.
* ``ours``: RedisSession as shipped (validation, codec, timeout, today's scripts).
* ``a zset``: today's layout bare: sorted set + meta hash, the backend's APPEND/POP scripts.
* ``b list+lua``: a list of ``"<seq>:<json>"`` and a counter string; add is one script
  (INCRBY, RPUSH); pop is a bare RPOP; newest N is LRANGE.
* ``b' list+lua+times``: as b, plus the catalog's ``updated_ms`` (TIME + HSET) as today's
  script keeps it.
* ``lua bound``: a script that only RPUSHes its arguments to a plain list (no numbers, so not
  a contender): what any Lua call costs over the bare command, the floor of a and b.
* ``c1 list multi``: MULTI{INCRBY; RPUSH} without Lua: atomic, but the items cannot carry the
  number (it is not known before EXEC), so numbers are positions + an offset that a pop breaks;
  shown for the cost of a Lua-free atomic write only.
* ``c2 list watch``: numbers carried by the items without Lua: WATCH, GET counter, MULTI{SET;
  RPUSH}, retried on conflict (three round trips in redis-py's idiom).
* ``d stream``: XADD with id ``0-*`` (Redis 7: the server numbers 0-1, 0-2, ...; a stream never
  reuses an id, even after XDEL/XTRIM); a batch is MULTI{XADD x n}; pop needs a script
  (XREVRANGE + XDEL); newest N is XREVRANGE.

Each history is prefilled to ``--size`` items; every timed call alternates the contenders in a
shuffled order; ``pop`` and ``add 1`` are followed by an untimed add/pop that keeps the size.
Then a separate pass reads Redis's INFO commandstats around each operation to give the server
time per call (the script and each command it makes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import raw
from benchmarks.harness import alternate, item, purge, run_prefix

REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")

LIST_ADD = """
local n = #ARGV
local last = redis.call('INCRBY', KEYS[2], n)
if last == n then
  -- No counter (new session, or it was lost): continue above the newest stored item.
  local top = redis.call('LINDEX', KEYS[1], -1)
  if top then
    last = tonumber(string.match(top, '^(%d+):')) + n
    redis.call('SET', KEYS[2], last)
  end
end
local args = {}
for i = 1, n do args[i] = (last - n + i) .. ':' .. ARGV[i] end
redis.call('RPUSH', KEYS[1], unpack(args))
return last
"""

LIST_ADD_TIMES = LIST_ADD.replace(
    "return last",
    """local clock = redis.call('TIME')
redis.call('HSET', KEYS[3], 'updated_ms', clock[1] * 1000 + math.floor(clock[2] / 1000))
return last""",
)

LUA_BOUND = "return redis.call('RPUSH', KEYS[1], unpack(ARGV))"

STREAM_POP = """
local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #top == 0 then return false end
redis.call('XDEL', KEYS[1], top[1][1])
return top[1][2][2]
"""


class ZsetLayout:
    """Today's layout without the session class: APPEND / POP scripts, ZRANGE."""

    def __init__(self, client: Any, prefix: str) -> None:
        from agent_sessions.backends.redis.layout import APPEND, POP, session_keys

        self.client, self.keys = client, session_keys(prefix, "s")
        self.append, self.pop = APPEND, POP

    async def add_items(self, items: list[Any]) -> None:
        await self.append(self.client, self.keys, "0", *[raw.dumps(i) for i in items])

    async def get_items(self, limit: int) -> list[Any]:
        members = await self.client.zrange(self.keys[0], -limit, -1)
        return [raw.loads(m.partition(b":")[2]) for m in members]

    async def pop_item(self) -> Any:
        member = await self.pop(self.client, self.keys, "0")
        return None if member is None else raw.loads(member.partition(b":")[2])

    def all_keys(self) -> list[str]:
        return list(self.keys)


class ListLayout:
    """A list of ``"<seq>:<json>"`` numbered by a counter in one script; pop is RPOP."""

    def __init__(self, client: Any, prefix: str, script: str) -> None:
        self.client = client
        self.keys = (f"{prefix}:{{s}}:items", f"{prefix}:{{s}}:seq", f"{prefix}:{{s}}:meta")
        self.script = client.register_script(script)

    async def add_items(self, items: list[Any]) -> None:
        await self.script(keys=self.keys, args=[raw.dumps(i) for i in items])

    async def get_items(self, limit: int) -> list[Any]:
        members = await self.client.lrange(self.keys[0], -limit, -1)
        return [raw.loads(m.partition(b":")[2]) for m in members]

    async def pop_item(self) -> Any:
        member = await self.client.rpop(self.keys[0])
        return None if member is None else raw.loads(member.partition(b":")[2])

    def all_keys(self) -> list[str]:
        return list(self.keys)


class LuaBound(ListLayout):
    """RPUSH through a script, items unnumbered: the cost of the Lua call alone."""

    def __init__(self, client: Any, prefix: str) -> None:
        super().__init__(client, prefix, LUA_BOUND)

    async def add_items(self, items: list[Any]) -> None:
        await self.script(keys=self.keys[:1], args=[raw.dumps(i) for i in items])

    async def get_items(self, limit: int) -> list[Any]:
        return [raw.loads(m) for m in await self.client.lrange(self.keys[0], -limit, -1)]

    async def pop_item(self) -> Any:
        member = await self.client.rpop(self.keys[0])
        return None if member is None else raw.loads(member)


class ListMulti(ListLayout):
    """MULTI{INCRBY; RPUSH}: atomic without Lua, but the items do not carry their numbers."""

    def __init__(self, client: Any, prefix: str) -> None:
        super().__init__(client, prefix, "return 0")

    async def add_items(self, items: list[Any]) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.incrby(self.keys[1], len(items))
        pipe.rpush(self.keys[0], *[raw.dumps(i) for i in items])
        await pipe.execute()

    async def get_items(self, limit: int) -> list[Any]:
        return [raw.loads(m) for m in await self.client.lrange(self.keys[0], -limit, -1)]

    async def pop_item(self) -> Any:
        member = await self.client.rpop(self.keys[0])
        return None if member is None else raw.loads(member)


class ListWatch(ListLayout):
    """Numbers carried by the items without Lua: optimistic WATCH on the counter."""

    def __init__(self, client: Any, prefix: str) -> None:
        super().__init__(client, prefix, "return 0")

    async def add_items(self, items: list[Any]) -> None:
        from redis.exceptions import WatchError

        payloads = [raw.dumps(i) for i in items]
        async with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(self.keys[1])
                    last = int(await pipe.get(self.keys[1]) or 0)
                    pipe.multi()
                    pipe.set(self.keys[1], last + len(payloads))
                    pipe.rpush(
                        self.keys[0], *[f"{last + 1 + k}:{p}" for k, p in enumerate(payloads)]
                    )
                    await pipe.execute()
                    return
                except WatchError:
                    continue


class StreamLayout:
    """A stream whose ids are ``0-<seq>``; a batch is MULTI{XADD...}; pop is a script."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client, self.key = client, f"{prefix}:{{s}}:items"
        self.pop = client.register_script(STREAM_POP)

    async def add_items(self, items: list[Any]) -> None:
        if len(items) == 1:
            await self.client.xadd(self.key, {"d": raw.dumps(items[0])}, id="0-*")
            return
        pipe = self.client.pipeline(transaction=True)
        for i in items:
            pipe.xadd(self.key, {"d": raw.dumps(i)}, id="0-*")
        await pipe.execute()

    async def get_items(self, limit: int) -> list[Any]:
        entries = await self.client.xrevrange(self.key, count=limit)
        return [raw.loads(fields[b"d"]) for _, fields in reversed(entries)]

    async def pop_item(self) -> Any:
        member = await self.pop(keys=[self.key])
        return None if member is None else raw.loads(member)

    def all_keys(self) -> list[str]:
        return [self.key]


class Ours:
    def __init__(self, client: Any, prefix: str) -> None:
        from agent_sessions.backends.redis import RedisSession

        self.session = RedisSession("s", client=client, key_prefix=prefix)

    async def add_items(self, items: list[Any]) -> None:
        await self.session.add_items(items)

    async def get_items(self, limit: int) -> list[Any]:
        return await self.session.get_items(limit)

    async def pop_item(self) -> Any:
        return await self.session.pop_item()

    def all_keys(self) -> list[str]:
        return list(self.session.keys)


class Raw(raw.RawRedisList):
    def all_keys(self) -> list[str]:
        return [self.key]


def contenders(client: Any, p: str) -> dict[str, Any]:
    return {
        "raw": Raw(client, f"{p}-raw", "s"),
        "ours": Ours(client, f"{p}-ours"),
        "a zset": ZsetLayout(client, f"{p}-a"),
        "b list+lua": ListLayout(client, f"{p}-b", LIST_ADD),
        "b' list+lua+times": ListLayout(client, f"{p}-b2", LIST_ADD_TIMES),
        "lua bound": LuaBound(client, f"{p}-lb"),
        "c1 list multi": ListMulti(client, f"{p}-c1"),
        "c2 list watch": ListWatch(client, f"{p}-c2"),
        "d stream": StreamLayout(client, f"{p}-d"),
    }


ONE = [item(0)]
BATCH = [item(i) for i in range(20)]


async def add1(s: Any) -> Any:
    return await s.add_items(ONE)


async def add20(s: Any) -> Any:
    return await s.add_items(BATCH)


async def pop(s: Any) -> Any:
    return await s.pop_item()


async def get20(s: Any) -> Any:
    return await s.get_items(20)


OPS = {
    "add 1": (add1, pop),
    "add 20": (add20, None),
    "pop": (pop, add1),
    "get(limit=20)": (get20, None),
}


def _cmdstats(info: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {k[8:]: (v["calls"], v["usec"]) for k, v in info.items() if k.startswith("cmdstat_")}


async def server_time(client: Any, sessions: dict[str, Any], n: int) -> dict[str, dict[str, str]]:
    """Per contender and op: server µs per call of each command the op ran (INFO deltas;
    other clients' commands during the pass inflate it slightly)."""
    out: dict[str, dict[str, str]] = {}
    for op, (fn, restore) in OPS.items():
        for name, s in sessions.items():
            count = n // 5 if op == "add 20" else n
            before = _cmdstats(await client.info("commandstats"))
            for _ in range(count):
                await fn(s)
            after = _cmdstats(await client.info("commandstats"))
            parts = []
            for cmd, (calls, usec) in sorted(after.items(), key=lambda kv: -kv[1][1]):
                b_calls, b_usec = before.get(cmd, (0, 0))
                if cmd != "info" and calls - b_calls >= count * 0.9:
                    parts.append(f"{cmd} {(usec - b_usec) / count:.1f}")
            out.setdefault(name, {})[op] = ", ".join(parts)
            if restore is not None:
                for _ in range(count):
                    await restore(s)
    return out


async def main(calls: int, repeat: int, size: int) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL)
    prefix = run_prefix("layouts")
    sessions = contenders(client, prefix)
    ratios: dict[tuple[str, str], list[float]] = {}
    medians: dict[tuple[str, str], list[float]] = {}
    try:
        for s in sessions.values():
            for start in range(0, size, 500):
                await s.add_items([item(i) for i in range(start, min(size, start + 500))])
        for rep in range(repeat):
            for op, (fn, restore) in OPS.items():
                n = calls // 5 if op == "add 20" else calls
                samples = await alternate(sessions, fn, n, restore=restore)
                base = statistics.median(samples["raw"])
                for name, times in samples.items():
                    m = statistics.median(times)
                    medians.setdefault((name, op), []).append(m * 1e6)
                    ratios.setdefault((name, op), []).append(base / m)
                if op == "add 20":  # keep the history at its size
                    for s in sessions.values():
                        for _ in range(n * 20):
                            await s.pop_item()
            print(f"  round {rep + 1}/{repeat} done", flush=True)
        stats = await server_time(client, sessions, max(200, calls // 2))
    finally:
        for s in sessions.values():
            await client.delete(*s.all_keys())
        await client.aclose()
        await purge(prefix, redis_url=REDIS_URL)
    ops = list(OPS)
    print(f"\nraw time / layout time, median of {repeat} rounds ({size} items; µs in brackets)\n")
    print("| layout | " + " | ".join(ops) + " |")
    print("|---|" + "---:|" * len(ops))
    for name in sessions:
        cells = [
            f"{statistics.median(ratios[(name, op)]):.2f} "
            f"({statistics.median(medians[(name, op)]):.0f})"
            for op in ops
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nserver µs per call (INFO commandstats)\n")
    for name in sessions:
        print(f"{name}:")
        for op in ops:
            print(f"  {op}: {stats[name][op]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per contender")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of all operations")
    parser.add_argument("--size", type=int, default=10_000, help="items per history")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.repeat, args.size))
