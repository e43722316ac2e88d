"""Issue 13 items 1 and 3 on real PostgreSQL and MariaDB (asyncmy and aiomysql): a cancelled
write is settled when ``CancelledError`` reaches the caller, and connections the server ended
cost at most one failed operation, reported as BackendUnavailableError.

Faults touch only this module's own connections (pg_terminate_backend / KILL of their ids)
and tables with a random prefix, dropped at the end.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from agent_sessions.backends.sqlalchemy import SQLAlchemySession
from agent_sessions.errors import BackendUnavailableError
from tests.servers import MARIADB_URL, POSTGRES_URL, RUN, drop_sql_tables, require_server

pytestmark = pytest.mark.server

URLS = {
    "postgres": POSTGRES_URL,
    "mariadb-asyncmy": MARIADB_URL,
    "mariadb-aiomysql": MARIADB_URL.replace("+asyncmy", "+aiomysql"),
}


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


def _need(url: str) -> None:
    host_port = url.split("@", 1)[1].split("/", 1)[0]
    host, _, port = host_port.partition(":")
    name = "PostgreSQL" if url.startswith("postgresql") else "MariaDB"
    require_server(name, host, int(port or (5432 if name == "PostgreSQL" else 3306)))


@pytest_asyncio.fixture(params=list(URLS))
async def opened(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, SQLAlchemySession]]:
    url = URLS[request.param]
    _need(url)
    prefix = f"f{RUN}{uuid.uuid4().hex[:6]}_"
    session = SQLAlchemySession.from_url("fault", url=url, table_prefix=prefix)
    try:
        yield url, session
    finally:
        await session.close()
        await drop_sql_tables(url, prefix)


class _Locker:
    """A raw driver connection of the test holding row locks the session's writes wait for."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: Any = None

    async def hold(self, sql: str) -> None:
        if self.url.startswith("postgresql"):
            import asyncpg  # type: ignore[import-untyped]

            self.conn = await asyncpg.connect(self.url.replace("+asyncpg", ""))
            await self.conn.execute("BEGIN")
            await self.conn.fetch(sql)
        else:
            engine = create_async_engine(self.url)
            self._engine = engine
            fairy = await engine.raw_connection()
            self._fairy = fairy
            self.conn = fairy.driver_connection
            await self.conn.begin()
            async with self.conn.cursor() as cur:
                await cur.execute(sql)
                await cur.fetchall()

    async def release(self) -> None:
        if self.url.startswith("postgresql"):
            await self.conn.execute("COMMIT")
            await self.conn.close()
        else:
            await self.conn.commit()
            self._fairy.close()
            await self._engine.dispose()


async def _cancel_while_blocked(
    session: SQLAlchemySession, url: str, lock_sql: str, write: Callable[[], Awaitable[Any]]
) -> tuple[int, int]:
    """Start ``write`` while the test holds the row it needs, cancel it, release the lock
    0.3 s later; return the item count right when CancelledError arrived and 0.6 s later."""
    locker = _Locker(url)
    await locker.hold(lock_sql)
    task = asyncio.ensure_future(write())
    await asyncio.sleep(0.3)  # the statement is on the server, waiting for the lock
    task.cancel()
    release = asyncio.get_running_loop().call_later(
        0.3, lambda: asyncio.ensure_future(locker.release())
    )
    with pytest.raises(asyncio.CancelledError):
        await task
    at_cancel = await session.count_items()
    await asyncio.sleep(0.6)
    release.cancel()
    later = await session.count_items()
    return at_cancel, later


def _ph(url: str) -> str:
    return "$1" if url.startswith("postgresql") else "%s"


@pytest.mark.asyncio
async def test_a_cancelled_add_is_settled_when_the_cancellation_arrives(
    opened: tuple[str, SQLAlchemySession],
) -> None:
    url, session = opened
    await session.add_items([_msg("seed")])
    t = session._tables
    lock = f"SELECT last_seq FROM {t.sessions} WHERE session_id = 'fault' FOR UPDATE"
    at_cancel, later = await _cancel_while_blocked(
        session, url, lock, lambda: session.add_items([_msg("a"), _msg("b"), _msg("c")])
    )
    assert at_cancel == later, f"a cancelled add changed the session later: {at_cancel}->{later}"
    assert later in (1, 4)
    got = [i["content"] for i in await session.get_items()]  # type: ignore[typeddict-item]
    assert got in (["seed"], ["seed", "a", "b", "c"])


@pytest.mark.asyncio
async def test_a_cancelled_pop_is_settled_and_never_removes_a_later_item(
    opened: tuple[str, SQLAlchemySession],
) -> None:
    url, session = opened
    await session.add_items([_msg("one"), _msg("two")])
    t = session._tables
    lock = (
        f"SELECT seq FROM {t.messages} WHERE session_id = 'fault' "
        "ORDER BY seq DESC LIMIT 1 FOR UPDATE"
    )
    at_cancel, later = await _cancel_while_blocked(session, url, lock, session.pop_item)
    assert at_cancel == later, f"a cancelled pop removed an item later: {at_cancel}->{later}"
    await session.add_items([_msg("added after the cancel")])
    await asyncio.sleep(0.3)
    got = [i["content"] for i in await session.get_items()]  # type: ignore[typeddict-item]
    assert got[-1] == "added after the cancel" and got[0] == "one"


async def _own_connection_ids(session: SQLAlchemySession) -> list[int]:
    """Server-side ids of the connections this session keeps (asks each of them)."""
    store = session._cached[1]  # type: ignore[index]
    ids: list[int] = []
    for fairy in store.idle:
        conn: Any = fairy.driver_connection
        if hasattr(conn, "fetchval"):
            ids.append(int(await conn.fetchval("SELECT pg_backend_pid()")))
        else:
            async with conn.cursor() as cur:
                await cur.execute("SELECT CONNECTION_ID()")
                ids.append(int((await cur.fetchone())[0]))
    return ids


async def _terminate(url: str, ids: list[int]) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            for i in ids:
                if url.startswith("postgresql"):
                    await conn.execute(text(f"SELECT pg_terminate_backend({int(i)})"))
                else:
                    await conn.execute(text(f"KILL CONNECTION {int(i)}"))
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_connections_ended_by_the_server_cost_at_most_one_operation(
    opened: tuple[str, SQLAlchemySession],
) -> None:
    url, session = opened
    await asyncio.gather(*(session.add_items([_msg(str(i))]) for i in range(6)))
    ids = await _own_connection_ids(session)
    assert len(ids) >= 2, "the session should keep several idle connections"
    await _terminate(url, ids)
    await asyncio.sleep(0.2)
    failures: list[BaseException] = []
    for i in range(10):
        try:
            await session.get_items(limit=2)
            await session.add_items([_msg(f"after {i}")])
        except Exception as exc:
            failures.append(exc)
    print(
        f"\n[faults] {url.split(':')[0]}: ended {len(ids)} own connections; "
        f"{len(failures)} operation(s) failed afterwards: {[type(f).__name__ for f in failures]}"
    )
    assert len(failures) <= 1
    assert all(isinstance(f, BackendUnavailableError) for f in failures), failures
    got = [i["content"] for i in await session.get_items()]  # type: ignore[typeddict-item]
    assert got[-1] == "after 9"


@pytest.mark.asyncio
async def test_a_connection_ended_mid_write_is_unavailable_then_recovers(
    opened: tuple[str, SQLAlchemySession],
) -> None:
    url, session = opened
    await session.add_items([_msg("seed")])
    t = session._tables
    locker = _Locker(url)
    await locker.hold(f"SELECT last_seq FROM {t.sessions} WHERE session_id = 'fault' FOR UPDATE")
    task = asyncio.ensure_future(session.add_items([_msg("blocked")]))
    await asyncio.sleep(0.3)
    busy = [i for i in await _busy_ids(url, session) if i]
    await _terminate(url, busy)
    with pytest.raises(BackendUnavailableError):
        await asyncio.wait_for(task, 30)
    await locker.release()
    await session.add_items([_msg("after")])
    got = [i["content"] for i in await session.get_items()]  # type: ignore[typeddict-item]
    assert got[0] == "seed" and got[-1] == "after" and len(got) in (2, 3)


async def _busy_ids(url: str, session: SQLAlchemySession) -> list[int]:
    """Ids of server connections running a statement on this test's tables right now."""
    engine = create_async_engine(url)
    table = session._tables.sessions
    try:
        async with engine.connect() as conn:
            if url.startswith("postgresql"):
                rows = await conn.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE query LIKE :q "
                        "AND pid <> pg_backend_pid() AND state = 'active'"
                    ),
                    {"q": f"%INSERT INTO {table}%"},
                )
            else:
                rows = await conn.execute(
                    text(
                        "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE :q "
                        "AND ID <> CONNECTION_ID()"
                    ),
                    {"q": f"%INSERT INTO {table}%"},
                )
            return [int(r[0]) for r in rows]
    finally:
        await engine.dispose()


@pytest.mark.server
@pytest.mark.asyncio
@pytest.mark.parametrize("driver", ["asyncmy", "aiomysql"])
@pytest.mark.parametrize("moment", ["connect", "checkout"])
async def test_a_checkout_abandoned_by_its_caller_leaves_no_connection_out(
    driver: str, moment: str, sql_prefix: str
) -> None:
    """Callers cancelled while their connection is being made or checked out (a pool event
    cancels them): they end cancelled, and every connection is back in the pool or dropped,
    none left to the garbage collector ("non-checked-in connection")."""
    import gc
    import warnings

    from sqlalchemy import event

    require_server("MariaDB", "127.0.0.1", 3306)
    url = MARIADB_URL.replace("+asyncmy", f"+{driver}")
    # An engine of this test's own (the pool's events must not reach other sessions).
    kwargs = {"pool_size": 8, "pool_recycle": 3000 + uuid.uuid4().int % 1000}
    session = SQLAlchemySession.from_url(
        f"checkout-{RUN}",
        url=url,
        create_tables=True,
        table_prefix=sql_prefix,
        engine_kwargs=kwargs,
    )
    await session.add_items([_msg("one")])
    pool = session.engine.sync_engine.pool
    callers: list[asyncio.Future[Any]] = []

    def cancel_callers(*_: Any) -> None:
        for caller in callers:
            caller.cancel()

    event.listen(pool, moment, cancel_callers)
    try:
        callers += [asyncio.ensure_future(session.add_items([_msg(f"{n}")])) for n in range(6)]
        outcomes = await asyncio.gather(*callers, return_exceptions=True)
    finally:
        event.remove(pool, moment, cancel_callers)
    assert any(isinstance(o, asyncio.CancelledError) for o in outcomes)
    for _ in range(3):  # the abandoned checkouts settle in their done callbacks
        await asyncio.sleep(0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a connection left to the collector warns
        gc.collect()
    assert await session.count_items() in range(1, 8)
    await session.close()
    assert pool.checkedout() == 0, "a connection is still checked out"  # type: ignore[attr-defined]
