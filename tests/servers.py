"""Reaching the real servers tests need: fail under CI=true when one is missing, else skip."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid

import pytest

from benchmarks.harness import drop_tables

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "AGENT_SESSIONS_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "AGENT_SESSIONS_MARIADB_URL", "mysql+asyncmy://root@127.0.0.1:3306/test"
)
MONGODB_URL = os.environ.get("AGENT_SESSIONS_MONGODB_URL")

RUN = os.environ.setdefault("AGENT_SESSIONS_TEST_RUN", f"t{uuid.uuid4().hex[:8]}")
"""This test run's tag: every key, table and session id a test creates on a shared server
contains it, and tests/conftest.py removes whatever carries it at the end of the run. Child
processes inherit it through the environment. Other runs (other engineers, CI jobs) share the
servers at the same time: only the tag says what is ours to remove."""

REDIS_DBS = range(16)
SQL_URLS = {"postgresql": POSTGRES_URL, "mariadb": MARIADB_URL}
_PORTS = {"postgresql": 5432, "mariadb": 3306}


def sql_up() -> dict[str, str]:
    """The servers of SQL_URLS that are listening, by name."""
    return {name: url for name, url in SQL_URLS.items() if port_open("127.0.0.1", _PORTS[name])}


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Return whether a TCP connection to host:port succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_server(name: str, host: str, port: int) -> None:
    """Skip the test (fail it under CI=true) when ``name`` is not listening on host:port."""
    if port_open(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if IN_CI:
        pytest.fail(f"{message}; CI=true requires it (.ci/run starts it)", pytrace=False)
    pytest.skip(f"{message}; start it to run these tests")


async def drop_sql_tables(url: str, prefix: str) -> None:
    """Drop every table of the database at ``url`` whose name starts with ``prefix``."""
    await drop_tables(url, lambda name: name.startswith(prefix))


async def snapshot() -> set[str]:
    """Names of what the shared servers hold: Redis keys of every db, SQL tables, and the
    session ids in SQL tables that have a ``session_id`` column. Servers that are down are
    left out."""
    from redis.asyncio import Redis
    from sqlalchemy import text
    from sqlalchemy.exc import ProgrammingError
    from sqlalchemy.ext.asyncio import create_async_engine

    names: set[str] = set()
    if port_open("127.0.0.1", 6379):
        for db in REDIS_DBS:
            client = Redis.from_url(REDIS_URL.rsplit("/", 1)[0] + f"/{db}")
            try:
                names |= {f"redis/{db}/{k.decode()}" async for k in client.scan_iter(count=1000)}
            finally:
                await client.aclose()
    schema = {"postgresql": "current_schema()", "mariadb": "database()"}
    for server, url in sql_up().items():
        # Each statement on its own: another run may drop a table between two of them.
        engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                columns = await conn.execute(
                    text(
                        "SELECT table_name, column_name FROM information_schema.columns "
                        f"WHERE table_schema = {schema[server]}"
                    )
                )
                keyed: set[str] = set()
                for table, column in columns:
                    names.add(f"{server}/{table}")
                    if column == "session_id":
                        keyed.add(table)
                for table in keyed:
                    q = conn.dialect.identifier_preparer.quote(table)
                    try:
                        rows = await conn.execute(text(f"SELECT DISTINCT session_id FROM {q}"))
                    except ProgrammingError:  # dropped meanwhile
                        continue
                    names |= {f"{server}/{table}/{sid}" for (sid,) in rows}
        finally:
            await engine.dispose()
    return names


async def remove_run(tag: str) -> None:
    """Remove from the shared servers every key, table and session row whose name contains
    ``tag``."""
    from sqlalchemy import text
    from sqlalchemy.exc import ProgrammingError
    from sqlalchemy.ext.asyncio import create_async_engine

    if port_open("127.0.0.1", 6379):
        for db in REDIS_DBS:
            await drop_redis_keys(REDIS_URL.rsplit("/", 1)[0] + f"/{db}", f"*{tag}*")
    up = sql_up()
    for url in up.values():
        await drop_tables(url, lambda name: tag in name)
    rows = sorted(  # rows of "...sessions" tables last: the SDK's tables reference them
        (n.split("/", 2) for n in await snapshot() if not n.startswith("redis/") and tag in n),
        key=lambda r: r[1].endswith("sessions"),
    )
    for server, url in up.items():
        engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                for _, table, sid in (r for r in rows if len(r) == 3 and r[0] == server):
                    q = conn.dialect.identifier_preparer.quote(table)
                    delete = text(f"DELETE FROM {q} WHERE session_id = :s")
                    with contextlib.suppress(ProgrammingError):  # dropped meanwhile
                        await conn.execute(delete, {"s": sid})
        finally:
            await engine.dispose()


async def drop_redis_keys(url: str, match: str) -> None:
    """Delete every key of the Redis at ``url`` matching the glob ``match`` (a test run's
    prefix), including what clear_session keeps on purpose (counters)."""
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(match=match, count=1000)]
        for start in range(0, len(keys), 500):
            await client.delete(*keys[start : start + 500])
    finally:
        await client.aclose()
