"""The one timing harness of the benchmarks: contenders alternate call by call, in a new random
order every round, so load swings on a shared machine hit all of them alike.

A contender is anything with the Session coroutines it is asked to run; ``make(session_id)``
returns one. Warm mode builds one object per contender and times each call on it; fresh mode
times what a web handler does per request: build the object, make the call, close it.
Each call's latency is kept; tables show the median and the interquartile spread.
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

Factory = Callable[[str], Awaitable[Any]]
Op = Callable[[Any], Awaitable[Any]]


@dataclass
class Contender:
    name: str
    make: Factory
    """Session id -> a session-like object (a new object; connections may be shared)."""


@dataclass
class Result:
    """Per-call latencies (seconds) of one operation for every contender, from one run."""

    section: str
    operation: str
    size: int
    """Items in the history when the timed calls ran."""
    mode: str
    """"warm" (one object for all calls) or "fresh" (a new object per call)."""
    samples: dict[str, list[float]] = field(default_factory=dict)
    note: str = ""
    kind: str = "speed"
    """"speed": the first contender is ours, ratios are other time / ours (above 1: ours is
    faster). "overhead": the first is the baseline, ratios are contender time / baseline."""

    def median_us(self, name: str) -> float:
        return statistics.median(self.samples[name]) * 1e6

    def spread(self, name: str) -> float:
        """Interquartile range relative to the median (a measure of the run's noise)."""
        q = statistics.quantiles(self.samples[name], n=4)
        return (q[2] - q[0]) / statistics.median(self.samples[name])

    def summary(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "samples"}
        out["median_us"] = {n: round(self.median_us(n), 2) for n in self.samples}
        out["spread"] = {n: round(self.spread(n), 3) for n in self.samples}
        out["calls"] = {n: len(s) for n, s in self.samples.items()}
        return out


def item(i: int, size: int = 200) -> dict[str, Any]:
    """A message item of about ``size`` bytes of JSON."""
    text = f"message {i} " + "x" * max(0, size - 60)
    return {"role": "user" if i % 2 == 0 else "assistant", "content": text}


async def close(session: Any) -> None:
    """Close a session-like object, whether its ``close`` is sync, async or missing."""
    closer = getattr(session, "close", None)
    if closer is not None:
        result = closer()
        if inspect.isawaitable(result):
            await result


async def prefill(session: Any, count: int, size: int = 200) -> None:
    """Store ``count`` items in batches of 1,000 (untimed set-up)."""
    for start in range(0, count, 1000):
        await session.add_items([item(i, size) for i in range(start, min(count, start + 1000))])


async def alternate(
    contenders: dict[str, Any],
    op: Op,
    calls: int,
    *,
    fresh: dict[str, Callable[[], Awaitable[Any]]] | None = None,
    restore: Op | None = None,
    settle: Op | None = None,
    warmup: int = 5,
) -> dict[str, list[float]]:
    """Time ``op`` ``calls`` times per contender, alternating in a shuffled order per round.

    ``contenders`` maps a name to its warm object. With ``fresh`` (name -> factory of a new
    object for the same session), each timed call builds a new object, runs ``op`` on it and
    closes it. ``restore`` runs untimed after each call, on the warm object (e.g. a pop after
    an add keeps the history's size constant). ``settle`` runs untimed on the object the call
    used (in fresh mode before its close, which is then untimed too).
    """
    names = list(contenders)
    samples: dict[str, list[float]] = {n: [] for n in names}
    rng = random.Random(calls * 7919 + len(names))
    for n in range(warmup + calls):
        rng.shuffle(names)
        for name in names:
            started = time.perf_counter()
            session = await fresh[name]() if fresh is not None else contenders[name]
            await op(session)
            if fresh is not None and settle is None:
                await close(session)
            elapsed = time.perf_counter() - started
            if settle is not None:
                await settle(session)
                if fresh is not None:
                    await close(session)
            if n >= warmup:
                samples[name].append(elapsed)
            if restore is not None:
                await restore(contenders[name])
    return samples


def later(make: Callable[..., Any], *args: Any) -> Callable[[], Awaitable[Any]]:
    """A factory of ``make(*args)`` (awaited when it returns an awaitable), for fresh mode."""

    async def call() -> Any:
        made = make(*args)
        return await made if inspect.isawaitable(made) else made

    return call


def new_id(tag: str) -> str:
    return f"bench-{tag}-{uuid.uuid4().hex[:10]}"


# -- the run's context ----------------------------------------------------------------------------


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "-"


def _git_head() -> str:
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "-"


def machine_info() -> dict[str, Any]:
    """Machine, software versions and date of this run."""
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{_cpu_model()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}",
        "python": sys.version.split()[0],
        "commit": _git_head(),
        "packages": {
            p: _version(p)
            for p in (
                "openai-agents",
                "redis",
                "asyncpg",
                "asyncmy",
                "aiosqlite",
                "SQLAlchemy",
                "cryptography",
                "pymongo",
            )
        },
        "sqlite": __import__("sqlite3").sqlite_version,
    }


def save(path: str, payload: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)


# -- leaving the shared servers as we found them ---------------------------------------------------


def run_prefix(tag: str) -> str:
    """A key and table prefix unique to this run (lowercase letters, digits and ``_``, so it
    is a valid SQL table-name start and has no glob characters)."""
    return f"bench{tag}_{uuid.uuid4().hex[:8]}"


async def purge(
    prefix: str, *, redis_url: str | None = None, sql_urls: tuple[str, ...] = ()
) -> None:
    """Remove everything under ``prefix``: Redis keys (SCAN MATCH + UNLINK) at ``redis_url``
    and the tables whose names start with it in each of ``sql_urls``. Sequence counters and
    family records survive ``clear_session`` by design, so benchmarks call this in a
    ``finally`` instead. Servers that are unreachable are skipped."""
    if not prefix:
        raise ValueError("an empty prefix would match everything")
    if redis_url:
        from redis.asyncio import Redis

        client = Redis.from_url(redis_url)
        try:
            pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix) + "*"
            batch: list[Any] = []
            async for key in client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    await client.unlink(*batch)
                    batch.clear()
            if batch:
                await client.unlink(*batch)
        except OSError:
            pass
        finally:
            await client.aclose()
    for url in sql_urls:
        await drop_tables(url, lambda name: name.startswith(prefix))


async def drop_tables(url: str, doomed: Callable[[str], bool]) -> None:
    """Drop every table of the database at ``url`` whose name ``doomed`` accepts (the tests'
    clean-up uses it too)."""
    from sqlalchemy import inspect as sa_inspect
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            names = await conn.run_sync(lambda sync: sa_inspect(sync).get_table_names())
            names = [name for name in names if doomed(name)]
            functions: list[str] = []
            if conn.dialect.name == "postgresql":
                # The trigger functions of the full-text index (search_text) outlive tables.
                result = await conn.execute(
                    text(
                        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n "
                        "ON n.oid = p.pronamespace WHERE n.nspname = current_schema()"
                    )
                )
                functions = [name for (name,) in result if doomed(name)]
            if not names and not functions:
                return
            quoted = ", ".join(conn.dialect.identifier_preparer.quote(n) for n in names)
            if conn.dialect.name == "postgresql":
                if names:
                    await conn.execute(text(f"DROP TABLE IF EXISTS {quoted} CASCADE"))
                for name in functions:
                    q = conn.dialect.identifier_preparer.quote(name)
                    await conn.execute(text(f"DROP FUNCTION IF EXISTS {q}() CASCADE"))
            else:
                await conn.execute(text("SET FOREIGN_KEY_CHECKS = 0"))
                await conn.execute(text(f"DROP TABLE IF EXISTS {quoted}"))
                await conn.execute(text("SET FOREIGN_KEY_CHECKS = 1"))
    finally:
        await engine.dispose()
