"""Fault injection on every backend (issue 13): kill -9 of writer processes, random
cancellation at every await point checked against a reference model after every operation,
connection termination (PostgreSQL, MariaDB: this test's own connections only), stop /
SIGSTOP / restart of a private redis-server, and threads x event loops on SQLite.

Each test records what it injected and what it checked; the lines are printed at the end of
the pytest run. ``FAULT_SCALE`` (default 1) multiplies the rounds: ``make faults`` runs a soak.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from agent_sessions import SQLiteSession
from agent_sessions.errors import BackendUnavailableError
from agent_sessions.testing import texts
from agent_sessions.testing.helpers import item_text

from .fault_report import SEED as SEED_HOLDER
from .fault_report import report
from .fault_writer import open_store
from .redis_servers import RedisServer, require_binaries
from .servers import (
    MARIADB_URL,
    POSTGRES_URL,
    REDIS_URL,
    RUN,
    drop_redis_keys,
    drop_sql_tables,
    require_server,
)

SCALE = max(1, int(os.environ.get("FAULT_SCALE", "1")))
REPO = Path(__file__).resolve().parent.parent
SEED = int(os.environ.get("FAULT_SEED", str(random.randrange(1 << 30))))
"""Printed with the report lines, so a failing run can be replayed (FAULT_SEED=...)."""
SEED_HOLDER.append(SEED)

pytestmark = [pytest.mark.server, pytest.mark.timeout(300 * SCALE)]

# -- backends -------------------------------------------------------------------------------

KINDS = {
    "sqlite": ("sqlite", None),
    "redis": ("redis", ("Redis", 6379)),
    "postgres": ("sql", ("PostgreSQL", 5432)),
    "mariadb-asyncmy": ("sql", ("MariaDB", 3306)),
    "mariadb-aiomysql": ("sql", ("MariaDB", 3306)),
    "sqlalchemy-sqlite": ("sql", None),
    "memory": ("memory", None),
    "mongodb-standin": ("mongodb", None),
}
IN_PROCESS_ONLY = {"memory", "mongodb-standin"}
"""Stores that live in the process (kill -9 has nothing to check on them)."""


def _target(name: str, tmp: Path) -> str:
    if name == "sqlite":
        return str(tmp / "faults.db")
    if name == "redis":
        return REDIS_URL
    if name == "postgres":
        return POSTGRES_URL
    if name == "mariadb-aiomysql":
        return MARIADB_URL.replace("+asyncmy", "+aiomysql")
    if name == "sqlalchemy-sqlite":
        return f"sqlite+aiosqlite:///{tmp / 'faults-sa.db'}"
    if name in IN_PROCESS_ONLY:
        return ""
    return MARIADB_URL


class _Cleanup:
    """Drops what a test wrote on the shared servers (its own prefixes only)."""

    def __init__(self) -> None:
        self.redis: set[str] = set()
        self.sql: set[tuple[str, str]] = set()

    def prefix(self, name: str, target: str) -> str:
        prefix = f"flt{RUN}{uuid.uuid4().hex[:6]}_"
        kind = KINDS[name][0]
        if kind == "redis":
            self.redis.add(prefix)
        elif kind == "sql" and not target.startswith("sqlite"):
            self.sql.add((target, prefix))
        return prefix

    async def run(self) -> None:
        for prefix in self.redis:
            await drop_redis_keys(REDIS_URL, f"{prefix}:*")
        for url, prefix in self.sql:
            await drop_sql_tables(url, prefix)


@pytest.fixture
def cleanup() -> Iterator[_Cleanup]:
    c = _Cleanup()
    yield c
    asyncio.run(c.run())


def _need(name: str) -> None:
    server = KINDS[name][1]
    if server is not None:
        require_server(server[0], "127.0.0.1", server[1])


# -- kill -9 of writer processes ------------------------------------------------------------


class _Writers:
    """One process writing batches to several stores at once, and the batch numbers it
    reported committed per store."""

    def __init__(self, specs: list[tuple[str, str, str, str]], batch: int) -> None:
        self.acked: list[list[int]] = [[] for _ in specs]
        self.unknown: list[set[int]] = [set() for _ in specs]
        args = [a for n, target, prefix, sid in specs for a in (KINDS[n][0], target, prefix, sid)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fault_writer", str(batch), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        self.started = [threading.Event() for _ in specs]
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            fields = line.split()
            if not line.endswith("\n") or len(fields) < 2:
                # The kill cut this report short: the batch was not acknowledged. Reading on
                # (not crashing the thread) keeps every report before it counted.
                continue
            index, number, *unknown = fields
            if unknown:
                self.unknown[int(index)].add(int(number))
                continue
            self.acked[int(index)].append(int(number))
            self.started[int(index)].set()

    def wait_all_started(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(e.wait(max(0.0, deadline - time.monotonic())) for e in self.started)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.reader.join(10)


def test_kill_9_writers_leave_whole_batches_and_keep_every_acknowledged_one(
    tmp_path: Path, cleanup: _Cleanup
) -> None:
    names = [n for n in KINDS if n not in IN_PROCESS_ONLY and n != "mariadb-aiomysql"]
    for name in names:
        _need(name)
    rng = random.Random(SEED)
    batch, rounds = 7, 2 * SCALE
    checked: dict[str, int] = dict.fromkeys(names, 0)
    delays: list[float] = []
    for first_round in range(0, rounds, 2):  # two processes at a time: their start-ups overlap
        group: list[tuple[_Writers, list[tuple[str, str, str, str]]]] = []
        for rnd in range(first_round, min(first_round + 2, rounds)):
            specs = []
            for name in names:
                target = _target(name, tmp_path)
                specs.append((name, target, cleanup.prefix(name, target), f"kill-{rnd}"))
            group.append((_Writers(specs, batch), specs))
        for writers, _ in group:
            if not writers.wait_all_started(180):
                for w, _ in group:
                    w.kill()
                assert writers.proc.stderr is not None
                pytest.fail(f"a writer never committed: {writers.proc.stderr.read()[-2000:]}")
        for writers, _ in group:
            delay = rng.uniform(0.0, 0.5)  # each store is at its own point of its write loop
            time.sleep(delay)
            delays.append(delay)
            writers.kill()
        for writers, specs in group:
            for (name, target, prefix, sid), acked, unknown in zip(
                specs, writers.acked, writers.unknown, strict=True
            ):
                got = asyncio.run(_read_all(name, target, prefix, sid))
                assert len(got) % batch == 0, f"{name}: a partial batch survived kill -9"
                stored = []
                for start in range(0, len(got), batch):
                    n = got[start].split(":")[0]
                    assert got[start : start + batch] == [f"{n}:{k}" for k in range(batch)], name
                    stored.append(int(n))
                assert stored == sorted(stored), name
                missing = set(acked) - set(stored)
                assert not missing, f"{name}: acknowledged batches lost after kill -9: {missing}"
                in_flight = {max([*acked, *unknown], default=-1) + 1}
                assert set(stored) - set(acked) <= unknown | in_flight, name
                checked[name] += len(stored)
    report(
        "kill -9",
        f"{rounds} writer processes, each writing to {', '.join(names)} at once, killed "
        f"{', '.join(f'{d:.2f}' for d in delays)} s apart once all had committed "
        f"(batches of {batch})",
        "no partial batch, every acknowledged batch kept, at most the in-flight one extra; "
        + ", ".join(f"{n}: {c} batches" for n, c in checked.items()),
    )


async def _read_all(name: str, target: str, prefix: str, session_id: str) -> list[str]:
    s = open_store(KINDS[name][0], target, prefix, session_id)
    try:
        return texts(await s.get_items())
    finally:
        await s.close()


# -- random cancellation at every await point ----------------------------------------------


class _Model:
    """The reference: the items a session should hold, oldest first."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.counter = 0

    def batch(self, size: int) -> list[str]:
        out = [f"i{self.counter + k}" for k in range(size)]
        self.counter += size
        return out


async def _cancel_after(task: asyncio.Future[Any], steps: int) -> None:
    for _ in range(steps):
        if task.done():
            return
        await asyncio.sleep(0)
    task.cancel()


async def _duration(awaitable: Awaitable[Any]) -> float:
    """Seconds an uncancelled operation takes."""
    started = time.perf_counter()
    await awaitable
    return time.perf_counter() - started


@pytest_asyncio.fixture(params=list(KINDS))
async def fresh(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[str], Any]]:
    name = str(request.param)
    _need(name)
    cleanup = _Cleanup()
    target = _target(name, tmp_path)
    prefix = cleanup.prefix(name, target)
    opened: list[Any] = []

    def make(session_id: str) -> Any:
        s = open_store(KINDS[name][0], target, prefix, session_id)
        opened.append(s)
        return s

    make.name = name  # type: ignore[attr-defined]
    yield make
    for s in opened:
        await s.close()
    await cleanup.run()


@pytest.mark.asyncio
async def test_random_cancellation_at_every_await_point_matches_the_reference(
    fresh: Callable[[str], Any],
) -> None:
    name = fresh.name  # type: ignore[attr-defined]
    rng = random.Random(f"{SEED}:{name}")
    s = fresh("cancel")
    model = _Model()
    await s.get_items()  # opens the connection and the tables, outside the measurement
    first = model.batch(2)
    took = await _duration(s.add_items([{"role": "user", "content": t} for t in first]))
    model.items += first
    counts = {"ops": 0, "cancelled": 0, "cancelled but applied": 0, "state checks": 0}
    kinds: dict[str, int] = {}
    for step in range(60 * SCALE):
        op = rng.choices(["add", "pop", "get", "clear"], weights=[5, 3, 2, 0.3])[0]
        kinds[op] = kinds.get(op, 0) + 1
        before = list(model.items)
        if op == "add":
            new = model.batch(rng.randint(1, 4))
            coro: Awaitable[Any] = s.add_items([{"role": "user", "content": t} for t in new])
            outcomes = [before, before + new]
        elif op == "pop":
            coro = s.pop_item()
            outcomes = [before, before[:-1]]
        elif op == "clear":
            coro = s.clear_session()
            outcomes = [before, []]
        else:
            coro = s.get_items()
            outcomes = [before]
        task = asyncio.ensure_future(coro)
        # The first await points one by one (event-loop steps), then a random moment of the
        # I/O wait: some cancellations land before the write is sent, some while it runs.
        if step < 20 or rng.random() < 0.3:
            await _cancel_after(task, step if step < 20 else rng.randint(0, 20))
        else:
            await asyncio.sleep(rng.uniform(0, 1.5 * took))
            task.cancel()
        try:
            result = await task
            cancelled = False
        except asyncio.CancelledError:
            cancelled = True
            counts["cancelled"] += 1
        counts["ops"] += 1
        actual = texts(await s.get_items())
        counts["state checks"] += 1
        if not cancelled:
            expected = outcomes[-1]
            if op == "pop":
                assert (item_text(result) if result else None) == (before[-1] if before else None)
            if op == "get":
                assert texts(result) == before
            assert actual == expected, f"{name} step {step} {op}: {actual} != {expected}"
        else:
            assert actual in outcomes, f"{name} step {step} cancelled {op}: {actual}"
            if actual != before:
                counts["cancelled but applied"] += 1
        model.items = actual
        if step % 10 == 0:  # settled: nothing changes after the cancellation arrived
            await asyncio.sleep(0.05)
            assert texts(await s.get_items()) == actual, f"{name}: a late write after step {step}"
            counts["state checks"] += 1
        if len(model.items) > 40:
            await s.clear_session()
            model.items = []
    report(
        f"cancellation {name}",
        f"{counts['cancelled']} of {counts['ops']} operations cancelled "
        f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}) after 0..20 "
        f"event-loop steps or 0..{1.5 * took * 1000:.1f} ms",
        f"{counts['state checks']} reference checks; {counts['cancelled but applied']} "
        "cancelled writes had fully applied (allowed), none partial, none later",
    )


# -- connection termination on PostgreSQL and MariaDB (own connections only) ---------------


async def _own_ids(url: str, session: Any, prefix: str) -> list[int]:
    """Server ids of this session's idle connections and of any running on its tables."""
    ids: list[int] = []
    cached = session._cached
    for fairy in list(cached[1].idle) if cached else []:
        conn: Any = fairy.driver_connection
        if hasattr(conn, "fetchval"):
            ids.append(int(await conn.fetchval("SELECT pg_backend_pid()")))
        else:
            async with conn.cursor() as cur:
                await cur.execute("SELECT CONNECTION_ID()")
                ids.append(int((await cur.fetchone())[0]))
    return ids


async def _active_on(admin: Any, url: str, prefix: str) -> list[int]:
    if url.startswith("postgresql"):
        rows = await admin.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE query LIKE :q AND pid <> pg_backend_pid()"
            ),
            {"q": f"%{prefix}%"},
        )
    else:
        rows = await admin.execute(
            text(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE :q "
                "AND ID <> CONNECTION_ID()"
            ),
            {"q": f"%{prefix}%"},
        )
    return [int(r[0]) for r in rows]


async def _end(admin: Any, url: str, ids: list[int]) -> None:
    for i in ids:
        sql = f"SELECT pg_terminate_backend({i})" if url.startswith("postgresql") else f"KILL {i}"
        try:
            await admin.execute(text(sql))
        except Exception:  # already gone
            pass


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ["postgres", "mariadb-asyncmy", "mariadb-aiomysql"])
async def test_terminated_connections_cost_at_most_one_operation(name: str, tmp_path: Path) -> None:
    _need(name)
    url = _target(name, tmp_path)
    cleanup = _Cleanup()
    prefix = cleanup.prefix(name, url)
    rng = random.Random(f"{SEED}:{name}:term")
    s = open_store("sql", url, prefix, "term")
    admin_engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    model = _Model()
    injections = failures = unknown = 0
    worst_run = 0
    try:
        async with admin_engine.connect() as admin:
            await s.add_items([{"role": "user", "content": "seed"}])
            model.items = ["seed"]
            run = 0
            for step in range(40 * SCALE):
                mid_op = False
                if rng.random() < 0.25:  # end every idle connection of the session
                    injections += 1
                    await _end(admin, url, await _own_ids(url, s, prefix))
                    await asyncio.sleep(0.05)
                elif rng.random() < 0.15:
                    mid_op = True
                op = rng.choice(["add", "pop", "get"])
                before = list(model.items)
                new = model.batch(rng.randint(1, 3)) if op == "add" else []
                coro: Awaitable[Any]
                if op == "add":
                    coro = s.add_items([{"role": "user", "content": t} for t in new])
                elif op == "pop":
                    coro = s.pop_item()
                else:
                    coro = s.get_items()
                task = asyncio.ensure_future(coro)
                if mid_op:  # end the connections while the operation runs
                    injections += 1
                    await asyncio.sleep(rng.uniform(0, 0.003))
                    ids = await _own_ids(url, s, prefix) + await _active_on(admin, url, prefix)
                    await _end(admin, url, ids)
                try:
                    await task
                    run = 0
                except BackendUnavailableError:
                    failures += 1
                    run += 1
                    worst_run = max(worst_run, run)
                    if op != "get":
                        unknown += 1
                try:  # the read is an operation too: it may be the one that meets the fault
                    actual = texts(await s.get_items())
                except BackendUnavailableError:
                    failures += 1
                    run += 1
                    worst_run = max(worst_run, run)
                    actual = texts(await s.get_items())  # a second failure in a row fails here
                run = 0
                allowed = {"add": [before, before + new], "pop": [before, before[:-1]]}.get(
                    op, [before]
                )
                assert actual in allowed, f"{name} step {step} {op}: {actual} not in {allowed}"
                model.items = actual
    finally:
        await s.close()
        await admin_engine.dispose()
        await cleanup.run()
    assert worst_run <= 1, f"{name}: {worst_run} operations failed in a row after a termination"
    report(
        f"terminate {name}",
        f"{injections} terminations of the test's own connections (idle, and mid-operation)",
        f"{failures} operations failed, all BackendUnavailableError, never 2 in a row; "
        f"{unknown} failed writes found whole or absent; state matched the reference after "
        f"each of {40 * SCALE} operations",
    )


# -- a private redis-server: stop, SIGSTOP, restart -----------------------------------------


@pytest.mark.asyncio
async def test_redis_stop_sigstop_restart_fail_fast_and_recover(tmp_path: Path) -> None:
    require_binaries("redis-server", "redis-cli")
    from agent_sessions import RedisSession

    # Every write fsynced before its reply, so acknowledged writes survive a SIGKILL.
    server = RedisServer(tmp_path / "redis", None, "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    rng = random.Random(f"{SEED}:redis")
    s = RedisSession.from_url("outage", url=server.url, timeout=0.5)
    model = _Model()
    faults: dict[str, int] = {}
    failed = 0
    slowest = 0.0
    try:
        for step in range(30 * SCALE):
            fault = rng.choice(["none", "none", "sigstop", "stop", "kill"])
            faults[fault] = faults.get(fault, 0) + 1
            if fault == "sigstop":
                assert server.process is not None
                os.kill(server.process.pid, signal.SIGSTOP)
            elif fault == "stop":
                server.stop()  # SHUTDOWN SAVE: the data comes back with the restart
            elif fault == "kill":
                server.kill()  # SIGKILL: no save; the append-only file has every reply's write
            op = rng.choice(["add", "pop"])
            before = list(model.items)
            new = model.batch(rng.randint(1, 3)) if op == "add" else []
            started = time.monotonic()
            try:
                if op == "add":
                    await s.add_items([{"role": "user", "content": t} for t in new])
                else:
                    await s.pop_item()
                assert fault == "none", f"an operation succeeded during a {fault}"
            except BackendUnavailableError:
                assert fault != "none"
                failed += 1
                slowest = max(slowest, time.monotonic() - started)
            if fault == "sigstop":
                assert server.process is not None
                os.kill(server.process.pid, signal.SIGCONT)
            elif fault in ("stop", "kill"):
                server.start()
            actual = texts(await _retry(s.get_items))
            allowed = {"add": [before, before + new], "pop": [before, before[:-1]]}[op]
            if fault == "none":
                allowed = allowed[1:]
            assert actual in allowed, f"step {step} {op} during {fault}: {actual}"
            model.items = actual
    finally:
        await s.close()
        server.kill()
    assert slowest < 5.0, f"a call to a stopped server took {slowest:.1f} s (timeout 0.5 s)"
    report(
        "redis outage",
        f"on a private redis-server: {', '.join(f'{k} {v}' for k, v in sorted(faults.items()))}",
        f"{failed} operations failed fast (slowest {slowest:.2f} s, timeout 0.5 s) with "
        "BackendUnavailableError; each write whole or absent; the same session recovered "
        "and matched the reference after every restart",
    )


async def _retry(call: Callable[[], Awaitable[Any]]) -> Any:
    """A read right after a restart may meet the connection the restart broke: one retry."""
    try:
        return await call()
    except BackendUnavailableError:
        await asyncio.sleep(0.2)
        return await call()


# -- threads x event loops on SQLite --------------------------------------------------------


def test_sqlite_threads_times_event_loops_match_the_reference(tmp_path: Path) -> None:
    path = str(tmp_path / "threads.db")
    shared = SQLiteSession("shared", path)
    threads, loops_per_thread, ops = 6, 2 * SCALE, 25
    errors: list[str] = []
    checks, shared_adds = [0], [0]
    lock = threading.Lock()

    def worker(t: int) -> None:
        rng = random.Random(f"{SEED}:thread{t}")
        model = _Model()
        for loop_no in range(loops_per_thread):

            async def run() -> None:
                own = SQLiteSession(f"thread-{t}", path)
                try:
                    for _ in range(ops):
                        op = rng.choice(["add", "add", "pop", "get"])
                        if op == "add":
                            new = model.batch(rng.randint(1, 3))
                            await own.add_items([{"role": "user", "content": x} for x in new])
                            model.items += new
                            await shared.add_items([{"role": "user", "content": f"{t}:{new[0]}"}])
                            with lock:
                                shared_adds[0] += 1
                        elif op == "pop":
                            got = await own.pop_item()
                            expected = model.items.pop() if model.items else None
                            assert (item_text(got) if got else None) == expected
                        actual = texts(await own.get_items())
                        assert actual == model.items, f"thread {t}: {actual} != {model.items}"
                        with lock:
                            checks[0] += 1
                finally:
                    await own.close()

            try:
                asyncio.run(run())  # a new event loop every time
            except BaseException as exc:  # collected for the assertion below
                errors.append(f"thread {t} loop {loop_no}: {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(300)
    assert errors == []
    in_shared = asyncio.run(shared.get_items())
    asyncio.run(shared.close())
    assert len({texts([i])[0] for i in in_shared}) == len(in_shared) == shared_adds[0]
    report(
        "sqlite threads x loops",
        f"{threads} threads x {loops_per_thread} event loops each (asyncio.run), own sessions "
        "plus one session object shared by all threads",
        f"{checks[0]} reference checks after every operation; {len(in_shared)} items in the "
        "shared session, none lost or doubled",
    )
