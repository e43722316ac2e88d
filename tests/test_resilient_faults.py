"""ResilientSession under real outages: a private redis-server stopped and restarted in the
middle of a Runner conversation, kill -9 of a process replaying the spool, and PostgreSQL with
this test's own connections terminated and cut (the shared servers are never touched)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_sessions import InMemorySession
from agent_sessions.wrappers.resilient import (
    BATCH_KEY,
    CircuitBreaker,
    ResilientSession,
    RetryPolicy,
)
from tests.fault_report import report
from tests.fault_writer import open_store
from tests.flaky import FlakyPrimary
from tests.redis_servers import RedisServer, require_binaries
from tests.servers import MARIADB_URL, POSTGRES_URL, RUN, drop_sql_tables, require_server
from tests.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parent.parent
TURNS = 8
KILLS = int(os.environ.get("RESILIENT_KILLS", "1"))
"""kill -9 rounds during one replay; `make test-resilient-long` runs more."""
RETRY = RetryPolicy(attempts=3, base_delay=0.05, max_delay=0.2, total_timeout=3.0)


def _breaker() -> CircuitBreaker:
    return CircuitBreaker(failure_threshold=1, reset_timeout=0.2)


def _agent() -> tuple[Agent[Any], ScriptedModel]:
    steps: list[Any] = []
    for t in range(TURNS):
        steps.append([function_call("lookup", f'{{"q": {t}}}', call_id=f"call{t}")])
        steps.append([assistant_message(f"answer {t}")])
    model = ScriptedModel(steps)

    def lookup(q: int) -> str:
        return f"result {q}"

    return Agent(name="a", model=model, tools=[function_tool(lookup)]), model


async def _control() -> tuple[list[Any], Any]:
    """The same conversation over a store that never fails: what must be stored and seen."""
    agent, model = _agent()
    session = InMemorySession(f"control-{uuid.uuid4().hex[:8]}")
    for t in range(TURNS):
        await Runner.run(agent, f"question {t}", session=session)
    return await session.get_items(), model.calls[-2].input


def _stripped(items: list[Any]) -> list[Any]:
    assert all(BATCH_KEY in item for item in items), "every stored item carries its batch id"
    return [{k: v for k, v in item.items() if k != BATCH_KEY} for item in items]


async def _conversation(
    session: ResilientSession, outage: Any, recovery: Any, blip: Any = None
) -> tuple[list[str], Any]:
    """Run the turns; the primary goes down before turn 3 and comes back before turn 6."""
    agent, model = _agent()
    states: list[str] = []
    for t in range(TURNS):
        if t == 2 and blip is not None:
            await blip()
        if t == 3:
            outage()
        if t == 6:
            recovery()
            await asyncio.sleep(session.breaker.reset_timeout)  # then the breaker probes again
        await Runner.run(agent, f"question {t}", session=session)  # no turn may fail
        states.append(session.status.state)
    return states, model.calls[-2].input


@pytest.mark.asyncio
async def test_redis_stopped_and_restarted_mid_conversation(tmp_path: Path) -> None:
    require_binaries("redis-server", "redis-cli")
    from agent_sessions import RedisSession

    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        primary = RedisSession.from_url("conv", url=server.url, key_prefix="rs", timeout=1.0)
        session = ResilientSession(primary, tmp_path / "spool.db", retry=RETRY, breaker=_breaker())
        states, last_input = await _conversation(session, server.stop, server.start)
        assert states[:3] == ["healthy"] * 3
        assert states[3:6] == ["degraded"] * 3  # turns during the outage went to the spool
        assert states[6:] == ["healthy"] * 2 and session.status.spooled_items == 0
        expected, expected_input = await _control()
        stored = await RedisSession.from_url("conv", url=server.url, key_prefix="rs").get_items()
        assert _stripped(stored) == expected  # nothing lost, nothing twice, in write order
        assert last_input == expected_input  # the model saw the whole history
        await session.close()
        report(
            "resilient Redis outage mid-conversation",
            f"a private redis-server stopped before turn 3 of {TURNS} and restarted before turn 6",
            f"no turn failed; {len(expected)} items stored once, in order; the model saw them all",
        )
    finally:
        server.kill()


def _spawn_replay(
    kind: str, target: str, prefix: str, spool: Path, pause_after: int
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.resilient_child",
            kind,
            target,
            prefix,
            "kill",
            str(spool),
            str(pause_after),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )


def _kill_when_applied(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline()  # the child hangs right after a batch reached the primary
    assert line.strip() == "APPLIED", line
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


@contextlib.contextmanager
def _primary(kind: str, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(kind, target, prefix) of a primary of this test's own: a private redis-server, or
    tables with a prefix of its own on the shared PostgreSQL or MariaDB (dropped after)."""
    prefix = f"rk{RUN}{uuid.uuid4().hex[:6]}_"
    if kind == "redis":
        require_binaries("redis-server", "redis-cli")
        server = RedisServer(tmp_path / "redis")
        server.start()
        try:
            yield "redis", server.url, prefix
        finally:
            server.kill()
        return
    url = POSTGRES_URL if kind == "postgres" else MARIADB_URL
    require_server(kind, "127.0.0.1", 5432 if kind == "postgres" else 3306)
    try:
        yield "sql", url, prefix
    finally:
        asyncio.run(drop_sql_tables(url, prefix))


@pytest.mark.parametrize("kind", ["redis", "postgres", "mariadb"])
def test_kill_9_during_replay_then_reopen_is_exactly_once(tmp_path: Path, kind: str) -> None:
    """The spool holds batches written during an outage; replaying processes are killed with
    SIGKILL right after a batch reached the primary; a reopen replays exactly once."""
    with _primary(kind, tmp_path) as (store, target, prefix):
        asyncio.run(_kill_during_replay(kind, store, target, prefix, tmp_path / "spool.db"))


async def _kill_during_replay(kind: str, store: str, target: str, prefix: str, spool: Path) -> None:
    batches = [
        [{"role": "user", "content": f"b{b}-{i}"} for i in range(3)] for b in range(3 + 2 * KILLS)
    ]
    flaky = FlakyPrimary(open_store(store, target, prefix, "kill"))
    session = ResilientSession(flaky, spool, retry=RETRY, breaker=_breaker())  # type: ignore[arg-type]
    await session.add_items(batches[0])  # type: ignore[arg-type]
    flaky.down = True  # the outage: the rest goes to the spool
    for batch in batches[1:]:
        await session.add_items(batch)  # type: ignore[arg-type]
    assert session.status.spooled_batches == len(batches) - 1
    await session.close()
    await flaky.inner.close()  # FlakyPrimary does not close its store; its engine would outlive us

    applied = 1
    for kill in range(KILLS):  # each child dies right after a batch reached the primary
        pause_after = 2 if kill % 2 == 0 else 1
        await asyncio.to_thread(
            _kill_when_applied, _spawn_replay(store, target, prefix, spool, pause_after)
        )
        applied += pause_after

    reader = open_store(store, target, prefix, "kill")
    assert len(await reader.get_items()) == 3 * applied
    reopened = ResilientSession(open_store(store, target, prefix, "kill"), spool)
    # The last applied batch was not yet recorded in the spool: it is still there.
    assert (await reopened.current_status()).spooled_batches == len(batches) - applied + 1
    assert await reopened.replay() == len(batches) - applied  # found it; wrote the rest
    flat = [item for batch in batches for item in batch]
    assert _stripped(await reader.get_items()) == flat
    assert (await reopened.current_status()).spooled_batches == 0
    await reopened.close()
    await reader.close()
    report(
        f"resilient kill -9 during replay ({kind})",
        f"{len(batches) - 1} batches spooled in an outage, {KILLS} replaying process(es) "
        "killed with SIGKILL right after a batch reached the primary",
        f"a reopen found the unrecorded batch and replayed the rest: {len(flat)} items, "
        "each once, in order",
    )


class _Postgres:
    """This test's own route to the shared PostgreSQL: a TCP proxy it can cut, connections
    named so that only they are terminated, a table prefix of its own."""

    def __init__(self) -> None:
        require_server("PostgreSQL", "127.0.0.1", 5432)
        self.app = f"as-resilient-{uuid.uuid4().hex[:8]}"
        self.prefix = f"rs{RUN}{uuid.uuid4().hex[:6]}_"
        self.proxy = TcpProxy(("127.0.0.1", 5432))
        self.proxy.start()
        self.terminated: list[int] = []

    def open(self, tmp_path: Path) -> ResilientSession:
        from agent_sessions import SQLAlchemySession

        url = POSTGRES_URL.replace("127.0.0.1:5432", f"127.0.0.1:{self.proxy.port}")
        primary = SQLAlchemySession.from_url(
            "conv",
            url=url,
            table_prefix=self.prefix,
            connect_timeout=2.0,
            command_timeout=2.0,
            engine_kwargs={"connect_args": {"server_settings": {"application_name": self.app}}},
        )
        return ResilientSession(primary, tmp_path / "spool.db", retry=RETRY, breaker=_breaker())

    async def terminate_own_connections(self) -> None:
        """pg_terminate_backend of this test's connections only (its application_name)."""
        import asyncpg  # type: ignore[import-untyped]

        admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg", "postgresql"))
        try:
            rows = await admin.fetch(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = $1",
                self.app,
            )
        finally:
            await admin.close()
        self.terminated.extend(row["pid"] for row in rows)

    async def stored(self) -> list[Any]:
        from agent_sessions import SQLAlchemySession

        reader = SQLAlchemySession.from_url("conv", url=POSTGRES_URL, table_prefix=self.prefix)
        try:
            return _stripped(await reader.get_items())
        finally:
            await reader.close()

    async def drop(self) -> None:
        self.proxy.cut()
        await drop_sql_tables(POSTGRES_URL, self.prefix)


@pytest.mark.asyncio
async def test_postgres_cut_mid_conversation(tmp_path: Path) -> None:
    """Every connection of this test is closed and new ones are refused from turn 3 to 6."""
    pg = _Postgres()
    try:
        session = pg.open(tmp_path)
        states, last_input = await _conversation(session, pg.proxy.cut, pg.proxy.restore)
        assert states[3:6] == ["degraded"] * 3 and states[6:] == ["healthy"] * 2
        expected, expected_input = await _control()
        assert await pg.stored() == expected
        assert last_input == expected_input
        await session.close()
        report(
            "resilient PostgreSQL cut mid-conversation",
            f"this test's TCP route cut from turn 3 to turn 6 of {TURNS}",
            f"no turn failed; {len(expected)} items stored once, in order",
        )
    finally:
        await pg.drop()


@pytest.mark.asyncio
async def test_postgres_own_connections_terminated_mid_conversation(tmp_path: Path) -> None:
    """pg_terminate_backend of this test's own connections before turn 2, then a cut."""
    pg = _Postgres()
    try:
        session = pg.open(tmp_path)
        states, last_input = await _conversation(
            session, pg.proxy.cut, pg.proxy.restore, blip=pg.terminate_own_connections
        )
        assert pg.terminated, "the blip terminated this test's own connections"
        assert states[2] == "healthy"  # a terminated connection costs a retry, not the spool
        expected, expected_input = await _control()
        assert await pg.stored() == expected
        assert last_input == expected_input
        await session.close()
    finally:
        await pg.drop()
