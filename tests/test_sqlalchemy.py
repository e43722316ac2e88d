"""SQLAlchemySession on real PostgreSQL, MariaDB and SQLite: the conformance kit, faults, schema.

Every table of this module carries a random prefix and is dropped at the end, so parallel runs
against the same servers do not meet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from agents.memory import Session
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from agent_sessions import open_session
from agent_sessions.backends.sql.session import SQLAlchemySession, _SharedEngine
from agent_sessions.errors import (
    BackendDataError,
    BackendUnavailableError,
    InvalidItemError,
    InvalidSessionIdError,
    ItemTooLargeError,
)
from agent_sessions.testing import SessionConformanceSuite
from agent_sessions.testing.helpers import item_text, texts
from agent_sessions.wrappers.ttl import TTLSession
from tests.servers import MARIADB_URL, POSTGRES_URL, RUN, drop_sql_tables, require_server
from tests.wrapper_stacks import FakeClock

PREFIX = f"t{RUN}_"
AIOMYSQL_URL = MARIADB_URL.replace("+asyncmy", "+aiomysql")
SERVERS = {
    "postgres": (POSTGRES_URL, "PostgreSQL", 5432),
    "mariadb": (MARIADB_URL, "MariaDB", 3306),
}
_created: dict[str, set[str]] = {"postgres": set(), "mariadb": set()}


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


def _need(kind: str) -> str:
    url, name, _ = SERVERS[kind]
    host_port = url.split("@", 1)[1].split("/", 1)[0]
    host, _, port = host_port.partition(":")
    require_server(name, host, int(port or SERVERS[kind][2]))
    return url


def _prefix(kind: str, tag: str = "") -> str:
    prefix = f"{PREFIX}{tag}"
    _created[kind].add(prefix)
    return prefix


async def _drop(url: str, prefixes: set[str]) -> None:
    for prefix in prefixes:
        await drop_sql_tables(url, prefix)


@pytest.fixture(scope="module", autouse=True)
def _drop_tables_at_end() -> Iterator[None]:
    yield
    for kind, prefixes in _created.items():
        url = SERVERS[kind][0]
        if prefixes:
            with contextlib.suppress(Exception):
                asyncio.run(_drop(url, prefixes))


# -- the conformance kit on every database --------------------------------------------------


class _OwnEngineSession(SQLAlchemySession):
    """Disposes its private engine on close (the caller's job for a real application)."""

    async def _close(self) -> None:
        await super()._close()
        await self.engine.dispose()


class TestMariaDBCallerEngineConformance(SessionConformanceSuite):
    """A caller's engine with SQLAlchemy's defaults (no autocommit, ROLLBACK on check-in,
    REPEATABLE READ), over the aiomysql driver."""

    @pytest.fixture(autouse=True)
    def _server(self) -> None:
        _need("mariadb")
        self.prefix = _prefix("mariadb", "own_")

    async def create_session(self, session_id: str) -> Session:
        engine = create_async_engine(f"{AIOMYSQL_URL}?charset=utf8mb4")
        return _OwnEngineSession(
            session_id, engine=engine, create_tables=True, table_prefix=self.prefix
        )


# -- fixtures for the targeted tests ------------------------------------------------------


@pytest.fixture(params=["postgres", "mariadb"])
def server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(kind, url) of each real server."""
    return request.param, _need(request.param)


@pytest_asyncio.fixture
async def opened(server: tuple[str, str]) -> AsyncIterator[list[SQLAlchemySession]]:
    """Sessions to close (and clear) after the test."""
    sessions: list[SQLAlchemySession] = []
    yield sessions
    for s in sessions:
        if not s.closed:
            with contextlib.suppress(Exception):
                await s.clear_session()
            await s.close()


def _open(
    server: tuple[str, str], opened: list[SQLAlchemySession], **options: Any
) -> SQLAlchemySession:
    kind, url = server
    options.setdefault("table_prefix", _prefix(kind))
    s = SQLAlchemySession.from_url(f"t-{uuid.uuid4().hex[:8]}", url=url, **options)
    opened.append(s)
    return s


# -- faults ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TcpProxy:
    """Forwards 127.0.0.1:port to a real server; ``stop()`` cuts every connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = _free_port()
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.frozen = asyncio.Event()  # set: swallow traffic, keep connections open

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.transport.abort()
        self.writers.clear()
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if not self.frozen.is_set():
                        dst.write(data)
                        await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.transport.abort()

        with contextlib.suppress(asyncio.CancelledError):  # the test's loop is closing
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def _via(url: str, port: int) -> str:
    head, tail = url.split("@", 1)
    return f"{head}@127.0.0.1:{port}/{tail.split('/', 1)[1]}"


@pytest.mark.asyncio
async def test_closed_port_raises_backend_unavailable(server: tuple[str, str]) -> None:
    url = server[1]
    s = SQLAlchemySession.from_url("x", url=_via(url, _free_port()), connect_timeout=3)
    try:
        with pytest.raises(BackendUnavailableError) as info:
            await asyncio.wait_for(s.add_items([_msg("lost")]), 30)  # a guard against a hang
        assert "unreachable" in str(info.value)
        with pytest.raises(BackendUnavailableError):
            await asyncio.wait_for(s.get_items(), 30)
    finally:
        await s.close()


@pytest.mark.asyncio
async def test_server_lost_then_back_recovers(server: tuple[str, str]) -> None:
    kind, url = server
    proxy = TcpProxy(int(SERVERS[kind][0].split("@", 1)[1].split("/")[0].split(":")[1]))
    await proxy.start()
    prefix = _prefix(kind)
    s = SQLAlchemySession.from_url("lost", url=_via(url, proxy.port), table_prefix=prefix)
    try:
        await s.add_items([_msg("before")])
        await proxy.stop()
        with pytest.raises(BackendUnavailableError):
            await asyncio.wait_for(s.add_items([_msg("during")]), 30)
        with pytest.raises(BackendUnavailableError):
            await asyncio.wait_for(s.get_items(), 30)
        await proxy.start()
        await s.add_items([_msg("after")])
        assert texts(await s.get_items()) == ["before", "after"]
        await s.clear_session()
    finally:
        await s.close()
        with contextlib.suppress(Exception):
            await proxy.stop()


@pytest.mark.asyncio
async def test_server_that_stops_answering_times_out(server: tuple[str, str]) -> None:
    kind, url = server
    proxy = TcpProxy(int(SERVERS[kind][0].split("@", 1)[1].split("/")[0].split(":")[1]))
    await proxy.start()
    s = SQLAlchemySession.from_url(
        "mute",
        url=_via(url, proxy.port),
        table_prefix=_prefix(kind),
        command_timeout=1,
        connect_timeout=1,
    )
    try:
        await s.add_items([_msg("before")])
        proxy.frozen.set()
        with pytest.raises(BackendUnavailableError):
            await asyncio.wait_for(s.get_items(), 30)  # a guard against a hang
        with pytest.raises(BackendUnavailableError):  # new connections hang as well
            await asyncio.wait_for(s.add_items([_msg("unknown")]), 30)
        proxy.frozen.clear()
        await s.clear_session()
    finally:
        await s.close()
        await proxy.stop()


@pytest.mark.asyncio
async def test_failed_batch_leaves_no_rows_and_no_gap(
    server: tuple[str, str], opened: list[SQLAlchemySession]
) -> None:
    s = _open(server, opened)
    assert await s.add_sequenced_items([_msg("a")]) == [1]
    # A stray row at seq 3 makes the third row of the next batch collide mid-INSERT.
    async with s.engine.begin() as conn:
        await conn.execute(
            text(
                f"INSERT INTO {s.messages_table} (session_id, seq, message_data) "
                "VALUES (:sid, 3, :data)"
            ),
            {"sid": s.session_id, "data": '{"role":"user","content":"stray"}'},
        )
    with pytest.raises(Exception) as info:
        await s.add_items([_msg("b"), _msg("c"), _msg("d")])
    assert not isinstance(info.value, BackendUnavailableError)
    assert texts(await s.get_items()) == ["a", "stray"]
    # The counter rolled back with the rows: the next batch starts right after seq 1 again.
    async with s.engine.begin() as conn:
        await conn.execute(
            text(f"DELETE FROM {s.messages_table} WHERE session_id = :sid AND seq = 3"),
            {"sid": s.session_id},
        )
    assert await s.add_sequenced_items([_msg("b"), _msg("c")]) == [2, 3]
    assert texts(await s.get_items()) == ["a", "b", "c"]


@pytest.mark.asyncio
async def test_batches_above_max_allowed_packet_are_split_but_atomic(
    opened: list[SQLAlchemySession],
) -> None:
    server = ("mariadb", _need("mariadb"))
    s = _open(server, opened)
    big = [_msg(f"{i}" + "x" * (1024 * 1024)) for i in range(20)]  # 20 MiB > 16 MiB packet
    assert await s.add_sequenced_items(big) == list(range(1, 21))
    assert await s.count_items() == 20
    assert (await s.get_items(limit=1))[0] == big[-1]
    huge = _msg("y" * (17 * 1024 * 1024))
    s_big = _open(server, opened, max_item_bytes=32 * 1024 * 1024)
    with pytest.raises(ItemTooLargeError) as info:
        await s_big.add_items([_msg("ok"), huge])
    assert info.value.index == 1 and "max_allowed_packet" in str(info.value)
    assert await s_big.get_items() == []


@pytest.mark.asyncio
async def test_a_swap_above_max_allowed_packet_is_split_too(
    opened: list[SQLAlchemySession],
) -> None:
    """The SDK compaction hook's swap appends like add_items: a batch above the server's
    max_allowed_packet goes in several INSERTs of one transaction."""
    s = _open(("mariadb", _need("mariadb")), opened)
    await s.add_items([_msg("old")])
    big = [_msg(f"{i}" + "x" * (1024 * 1024)) for i in range(20)]  # 20 MiB > 16 MiB packet
    assert await s._atomic_replace_items(big)
    assert await s.get_sequenced_items(limit=1) == [(21, big[-1])]
    assert await s.count_items() == 20


@pytest.mark.asyncio
async def test_mysql_locking_pop_path(opened: list[SQLAlchemySession]) -> None:
    """The MySQL pop (SELECT .. FOR UPDATE, DELETE) exercised on MariaDB: concurrent pops
    still return every item once."""
    s = _open(("mariadb", _need("mariadb")), opened)
    await s.add_items([_msg(str(i)) for i in range(60)])
    store_dialect = None
    from agent_sessions.backends.sql.session import _store_for

    store_dialect = _store_for(s.engine, s._tables).dialect
    store_dialect.mariadb = False  # type: ignore[attr-defined]
    try:
        popped = await asyncio.gather(*(s.pop_item() for _ in range(70)))
    finally:
        store_dialect.mariadb = True  # type: ignore[attr-defined]
    got = sorted(int(item_text(p)) for p in popped if p is not None)
    assert got == list(range(60))


@pytest.mark.asyncio
async def test_more_concurrent_operations_than_the_pool_holds_close_cleanly(
    server: tuple[str, str], opened: list[SQLAlchemySession], caplog: pytest.LogCaptureFixture
) -> None:
    """Connections the pool does not keep (its overflow) are closed by the async driver,
    which awaits: returned without a greenlet, each failed with MissingGreenlet, was logged
    and left its socket to the garbage collector."""
    s = _open(server, opened)
    sessions = [s, *(s.sibling(f"{s.session_id}-{i}") for i in range(39))]
    opened.extend(sessions[1:])
    with caplog.at_level(logging.ERROR):
        await asyncio.gather(*(x.add_items([_msg(x.session_id)]) for x in sessions))
        assert [await x.get_items() for x in sessions] == [[_msg(x.session_id)] for x in sessions]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


# -- ids, names, schema -------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix", ["x; DROP TABLE t; --", "1abc_", "a-b_", "a b", "ä_", "x" * 60, "t`", 'a"']
)
def test_table_prefix_must_be_an_identifier(prefix: str) -> None:
    with pytest.raises(ValueError):
        SQLAlchemySession.from_url("x", url="sqlite+aiosqlite:///:memory:", table_prefix=prefix)
    with pytest.raises(ValueError):
        SQLAlchemySession.from_url(
            "x", url="sqlite+aiosqlite:///:memory:", sessions_table=prefix + "ssss"
        )


def test_engine_must_be_an_async_engine() -> None:
    with pytest.raises(TypeError, match="AsyncEngine"):
        SQLAlchemySession("x", engine="postgresql://localhost/db")  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionIdError):
        SQLAlchemySession.from_url("", url="sqlite+aiosqlite:///:memory:")
    assert not any(k[0] == "sqlite+aiosqlite:///:memory:" for k in _SharedEngine._registry)


@pytest.mark.asyncio
async def test_missing_tables_without_create_tables_is_a_clear_error(
    server: tuple[str, str],
) -> None:
    url = server[1]
    s = SQLAlchemySession.from_url(
        "x", url=url, create_tables=False, table_prefix=f"{PREFIX}absent_"
    )
    try:
        with pytest.raises(BackendDataError, match="create_tables=True"):
            await s.get_items()
    finally:
        await s.close()


@pytest.mark.asyncio
async def test_schema_statements_create_usable_tables(server: tuple[str, str]) -> None:
    kind, url = server
    prefix = _prefix(kind, "ddl_")
    engine = create_async_engine(url)
    try:
        dialect = "postgresql" if kind == "postgres" else "mariadb"
        async with engine.begin() as conn:
            for statement in SQLAlchemySession.schema_statements(dialect, table_prefix=prefix):
                await conn.execute(text(statement))
        s = SQLAlchemySession("x", engine=engine, table_prefix=prefix)  # create_tables=False
        await s.add_items([_msg("a")])
        assert texts(await s.get_items()) == ["a"]
        await s.clear_session()
        await s.close()
    finally:
        await engine.dispose()
    with pytest.raises(ValueError):
        SQLAlchemySession.schema_statements("oracle")


@pytest.mark.asyncio
async def test_an_engine_given_another_paramstyle_still_works(
    server: tuple[str, str], tmp_path: Path
) -> None:
    """The SQL runs on the driver connection in the driver's own paramstyle, whatever
    paramstyle the engine was created with."""
    kind, url = server
    for where in (url, f"sqlite+aiosqlite:///{tmp_path / 'named.db'}"):
        engine = create_async_engine(where, paramstyle="named")
        try:
            prefix = _prefix(kind, "ps_")
            s = SQLAlchemySession("x", engine=engine, table_prefix=prefix, create_tables=True)
            await s.add_items([_msg("a"), _msg("b")])
            assert texts(await s.get_items(limit=1)) == ["b"]
            assert await s.pop_item() == _msg("b")
            assert await s.count_items() == 1
            await s.close()
        finally:
            await engine.dispose()


@pytest.mark.asyncio
async def test_newer_schema_version_is_refused(server: tuple[str, str]) -> None:
    kind, url = server
    prefix = _prefix(kind, "v_")
    first = SQLAlchemySession.from_url("x", url=url, table_prefix=prefix)
    try:
        await first.add_items([_msg("a")])
        async with first.engine.begin() as conn:
            await conn.execute(text(f"UPDATE {prefix}schema SET version = 99"))
    finally:
        await first.close()
    second = SQLAlchemySession.from_url("x", url=url, table_prefix=prefix)
    try:
        with pytest.raises(BackendDataError, match="newer"):
            await second.get_items()
    finally:
        await second.close()


@pytest.mark.asyncio
async def test_foreign_table_with_our_name_is_refused(server: tuple[str, str]) -> None:
    kind, url = server
    prefix = _prefix(kind, "sdk_")
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:  # a table of the same name, not ours
            await conn.execute(
                text(f"CREATE TABLE {prefix}sessions (session_id VARCHAR(100) PRIMARY KEY)")
            )
        s = SQLAlchemySession("x", engine=engine, create_tables=True, table_prefix=prefix)
        with pytest.raises(BackendDataError, match="not agent_sessions tables"):
            await s.add_items([_msg("a")])
        await s.close()
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_ids_differing_in_case_and_trailing_space_are_distinct(
    server: tuple[str, str], opened: list[SQLAlchemySession]
) -> None:
    base = _open(server, opened)
    ids = ["k", "K", "k ", "k\\", "k%", "k_", "k'", "ķ", "\x1eside\x1ek" + "z" * 500]
    sessions = [base.sibling(i) for i in ids]
    opened.extend(sessions)
    for i, s in enumerate(sessions):
        await s.add_items([_msg(str(i))])
    for i, s in enumerate(sessions):
        assert texts(await s.get_items()) == [str(i)]


@pytest.mark.asyncio
async def test_sdk_style_table_names_and_engine_kwargs(server: tuple[str, str]) -> None:
    kind, url = server
    prefix = _prefix(kind, "n_")
    s = SQLAlchemySession.from_url(
        "x",
        url=url,
        engine_kwargs={"pool_size": 2},
        table_prefix=prefix,
        sessions_table=f"{prefix}sessions",
        messages_table=f"{prefix}messages",
        session_settings={"limit": 1},
    )
    try:
        await s.add_items([_msg("a"), _msg("b")])
        assert texts(await s.get_items()) == ["b"]
        assert (s.sessions_table, s.messages_table) == (f"{prefix}sessions", f"{prefix}messages")
        assert s.engine.pool.size() == 2  # type: ignore[attr-defined]
        await s.clear_session()
    finally:
        await s.close()


@pytest.mark.asyncio
async def test_sessions_from_one_url_share_an_engine_until_the_last_closes(
    server: tuple[str, str],
) -> None:
    kind, url = server
    prefix = _prefix(kind)
    a = SQLAlchemySession.from_url("a", url=url, table_prefix=prefix)
    b = SQLAlchemySession.from_url("b", url=url, table_prefix=prefix)
    side = a.sibling("\x1eside\x1ea")
    assert a.engine is b.engine is side.engine
    shared = a._shared
    assert shared is not None
    await a.add_items([_msg("a")])
    await a.close()
    assert texts(await b.get_items()) == []  # the engine still works for the others
    await side.close()
    await b.close()
    assert shared.key not in _SharedEngine._registry
    c = SQLAlchemySession.from_url("a", url=url, table_prefix=prefix)
    try:
        assert c.engine is not a.engine
        assert texts(await c.get_items()) == ["a"]
        await c.clear_session()
    finally:
        await c.close()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "scheme", ["postgres", "mysql+asyncmy", "mysql+aiomysql", "mariadb+asyncmy", "sqlite"]
)
async def test_open_session_schemes(scheme: str, tmp_path: Path) -> None:
    if scheme == "postgres":
        url, kind = _need("postgres"), "postgres"
    elif scheme == "sqlite":
        url, kind = f"sqlite+aiosqlite:///{tmp_path / 'o.db'}", ""
    else:
        url, kind = _need("mariadb").replace("mysql+asyncmy", scheme), "mariadb"
    prefix = _prefix(kind) if kind else "o_"
    s = await open_session(url, "opened", table_prefix=prefix)
    assert isinstance(s, SQLAlchemySession)
    try:
        await s.add_items([_msg("hi")])
        assert texts(await s.get_items()) == ["hi"]
        await s.clear_session()
    finally:
        await s.close()


@pytest.mark.asyncio
async def test_bad_batch_writes_nothing(
    server: tuple[str, str], opened: list[SQLAlchemySession]
) -> None:
    s = _open(server, opened)
    with pytest.raises(InvalidItemError):
        await s.add_items([_msg("ok"), {"bad": {1, 2}}])  # type: ignore[list-item]
    assert await s.count_items() == 0
    assert await s.add_sequenced_items([_msg("ok")]) == [1]


# -- range deletion (the TTL layer's purge) ---------------------------------------------------


async def _rows(s: SQLAlchemySession) -> int:
    async with s.engine.connect() as conn:
        result = await conn.execute(
            text(f"SELECT COUNT(*) FROM {s.messages_table} WHERE session_id = :sid"),
            {"sid": s.session_id},
        )
        return int(result.scalar_one())


@pytest.mark.asyncio
async def test_ttl_purge_removes_dead_rows_from_the_table(
    server: tuple[str, str], opened: list[SQLAlchemySession]
) -> None:
    clock = FakeClock()
    inner = _open(server, opened)
    s = TTLSession(inner, 3600, item_ttl=30, clock=clock, clock_skew=0)
    for i in range(10):
        await s.add_items([_msg(str(i))])
        clock.advance(5)
    # now = start + 50: items written before start + 20 (0..3) are dead
    assert await _rows(inner) == 10
    assert await s.purge_expired() == 4
    assert await _rows(inner) == 6
    assert texts(await s.get_items()) == [str(i) for i in range(4, 10)]
    assert await s.purge_expired() == 0


@pytest.mark.asyncio
async def test_range_delete_concurrent_with_writers_spares_every_newer_row(
    server: tuple[str, str], opened: list[SQLAlchemySession]
) -> None:
    writer = _open(server, opened)
    purger = SQLAlchemySession.from_url(
        writer.session_id, url=server[1], table_prefix=_prefix(server[0])
    )
    opened.append(purger)
    seqs = await writer.add_sequenced_items([_msg(f"old{i}") for i in range(50)])
    cut = seqs[-1] + 1

    async def write() -> list[int]:
        got: list[int] = []
        for i in range(40):
            got += await writer.add_sequenced_items([_msg(f"new{i}"), _msg(f"new{i}b")])
        return got

    deleted, new_seqs = await asyncio.gather(purger.delete_items(before=cut), write())
    assert deleted == 50
    assert min(new_seqs) >= cut
    assert await _rows(writer) == 80
    assert [item_text(i) for i in await writer.get_items(limit=2)] == ["new39", "new39b"]


@pytest.mark.asyncio
async def test_clear_keeps_the_counter_so_numbers_are_never_reused(
    server: tuple[str, str], opened: list[SQLAlchemySession]
) -> None:
    s = _open(server, opened)
    assert await s.add_sequenced_items([_msg("a"), _msg("b")]) == [1, 2]
    await s.clear_session()
    assert await _rows(s) == 0
    assert await s.add_sequenced_items([_msg("c")]) == [3]
    assert await s.delete_items(before=3) == 0  # a purge that read before the clear
    assert texts(await s.get_items()) == ["c"]


# -- a pop checked by a layer (EncryptedSession's key check) inside the pop's transaction ----


def _checked_pop_stores(tmp_path: Path) -> list[tuple[str, str]]:
    return [
        ("postgres", "postgres"),
        ("mariadb", "mariadb"),
        ("mariadb", "mysql"),  # the SELECT .. FOR UPDATE path, on MariaDB
        ("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'checked.db'}"),
    ]


@contextlib.contextmanager
def _mysql_path(s: SQLAlchemySession, on: bool) -> Iterator[None]:
    from agent_sessions.backends.sql.session import _store_for

    dialect = _store_for(s.engine, s._tables).dialect
    if on:
        dialect.mariadb = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if on:
            dialect.mariadb = True  # type: ignore[attr-defined]


@pytest.mark.asyncio
@pytest.mark.parametrize("ttl", [False, True], ids=["bare", "ttl"])
@pytest.mark.parametrize("store", range(4), ids=["postgres", "mariadb", "mysql-path", "sqlite"])
async def test_a_checked_pop_that_fails_deletes_nothing_and_concurrent_ones_never_repeat(
    store: int, ttl: bool, tmp_path: Path
) -> None:
    from agent_sessions.wrappers.encrypted import EncryptedSession, KeyMismatchError

    kind, where = _checked_pop_stores(tmp_path)[store]
    url = where if kind == "sqlite" else _need(kind)
    prefix = "cp_" if kind == "sqlite" else _prefix(kind, "cp_")
    session_id = f"t-{uuid.uuid4().hex[:8]}"
    opened: list[Any] = []

    def encrypted(key: str) -> EncryptedSession:
        inner: Any = SQLAlchemySession.from_url(session_id, url=url, table_prefix=prefix)
        opened.append(inner)
        return EncryptedSession(TTLSession(inner, 3600) if ttl else inner, encryption_key=key)

    good, other = encrypted("k" * 32), encrypted("o" * 32)
    bare = opened[0]
    with _mysql_path(bare, where == "mysql"):
        try:
            await good.add_items([_msg(str(i)) for i in range(30)])
            await other.add_items([_msg("other key")])
            stored = await bare.get_sequenced_items()
            for _ in range(2):  # the check fails inside the pop: it is rolled back
                with pytest.raises(KeyMismatchError):
                    await good.pop_item()
            assert await bare.get_sequenced_items() == stored
            assert item_text(await other.pop_item()) == "other key"
            popped = await asyncio.gather(*(good.pop_item() for _ in range(35)))
            got = sorted(int(item_text(p)) for p in popped if p is not None)
            assert got == list(range(30))
            assert await bare.get_items() == []
        finally:
            await bare.clear_session()
            for s in opened:
                await s.close()
