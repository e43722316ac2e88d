"""The public API as a new user meets it: explicit options, closable results of open_session,
URL aliases, driver and extra hints, one Redis pool per URL, the MariaDB charset check."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from typing import Any

import pytest

from agent_sessions import InMemorySession, SQLiteSession, open_session
from agent_sessions.core.registry import ClosableSession, driver_url
from agent_sessions.errors import BackendUnavailableError, MissingDependencyError
from tests.servers import MARIADB_URL, POSTGRES_URL, REDIS_URL, RUN, require_server

# -- explicit options -----------------------------------------------------------------------


def test_misspelt_option_names_the_valid_ones() -> None:
    with pytest.raises(TypeError) as info:
        SQLiteSession("s", db_pth="x.db")  # type: ignore[call-arg]
    message = str(info.value)
    assert "SQLiteSession got unknown option(s) 'db_pth'" in message
    assert "did you mean 'db_path'?" in message
    assert "busy_timeout" in message and "session_settings" in message
    assert "_database" not in message and "BaseSession" not in message
    with pytest.raises(TypeError, match=r"Valid options: .*store"):
        InMemorySession("s", stor=None)  # type: ignore[call-arg]


def test_wrapper_typo_names_the_valid_options() -> None:
    from agent_sessions import TTLSession

    with pytest.raises(TypeError, match="did you mean 'item_ttl'"):
        TTLSession(InMemorySession("s"), itemttl=5)  # type: ignore[call-arg]


@pytest.mark.asyncio
async def test_open_session_passes_the_typo_error_through(tmp_path: object) -> None:
    with pytest.raises(TypeError, match="did you mean 'busy_timeout'"):
        await open_session("sqlite:///:memory:", "s", busy_timeot=1)


def test_redis_from_url_typo_names_the_valid_options() -> None:
    from agent_sessions import RedisSession

    with pytest.raises(TypeError, match=r"\(did you mean .key_prefix.\?\)\. Valid options: url,"):
        RedisSession.from_url("s", url=REDIS_URL, key_prefx="x")  # type: ignore[call-arg]


def test_a_typeerror_from_inside_is_not_rewritten() -> None:
    with pytest.raises(TypeError, match="ttl must be a number"):
        from agent_sessions import RedisSession

        RedisSession.from_url("s", url=REDIS_URL, ttl="60")  # type: ignore[arg-type]


# -- open_session's result ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_open_session_result_is_closable_and_typed(tmp_path: object) -> None:
    async with await open_session("memory://", f"c-{RUN}") as session:
        await session.add_items([{"role": "user", "content": "hi"}])
        assert await session.get_items() == [{"role": "user", "content": "hi"}]
    other = await open_session("sqlite:///:memory:", "c")
    assert isinstance(other, ClosableSession)
    await other.close()
    await other.close()  # idempotent


@pytest.mark.asyncio
async def test_third_party_opener_without_close_gets_the_closable_shape() -> None:
    from agent_sessions import register_scheme
    from agent_sessions.core import registry

    class Bare:
        session_settings = None

        def __init__(self, session_id: str) -> None:
            self.session_id = session_id
            self.items: list[object] = []

        async def get_items(self, limit: int | None = None) -> list[object]:
            return list(self.items)

        async def add_items(self, items: list[object]) -> None:
            self.items.extend(items)

        async def pop_item(self) -> object | None:
            return self.items.pop() if self.items else None

        async def clear_session(self) -> None:
            self.items.clear()

    register_scheme("bare", lambda url, sid: Bare(sid))  # type: ignore[arg-type,return-value]
    try:
        async with await open_session("bare://x", "s") as session:
            await session.add_items([{"role": "user", "content": "x"}])
            assert await session.pop_item() == {"role": "user", "content": "x"}
            assert session.session_id == "s"
    finally:
        registry._SCHEMES.pop("bare")


# -- URL aliases --------------------------------------------------------------------------------


def test_plain_database_urls_map_to_the_installed_driver() -> None:
    assert driver_url("postgres://u@h/db") == "postgresql+asyncpg://u@h/db"
    assert driver_url("postgresql://u@h/db") == "postgresql+asyncpg://u@h/db"
    assert driver_url("mysql://u@h/db") == "mysql+asyncmy://u@h/db"
    assert (
        driver_url("mariadb://u@h/db?charset=utf8mb4") == "mariadb+asyncmy://u@h/db?charset=utf8mb4"
    )
    assert driver_url("redis://h") == "redis://h"


def test_plain_url_without_a_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def without_drivers(name: str, *args: Any) -> Any:
        return None if name in ("asyncpg", "asyncmy", "aiomysql") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_drivers)
    for url, extra in (("postgres://h/db", "postgres"), ("mariadb://h/db", "mysql")):
        with pytest.raises(MissingDependencyError, match=rf"agent-sessions-store\[{extra}\]"):
            driver_url(url)


def test_missing_driver_modules_name_their_extra() -> None:
    # A stand-in for an install without the extras: block the driver imports.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('redis', 'sqlalchemy', 'pymongo', 'asyncpg'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import asyncio, agent_sessions\n"
        "from agent_sessions.errors import MissingDependencyError\n"
        "for name, extra in (('RedisSession', 'redis'), ('SQLAlchemySession', 'sqlalchemy'),\n"
        "                    ('MongoDBSession', 'mongodb')):\n"
        "    try:\n"
        "        getattr(agent_sessions, name)\n"
        "    except MissingDependencyError as exc:\n"
        "        assert f'pip install \"agent-sessions-store[{extra}]\"' in str(exc), exc\n"
        "    else:\n"
        "        sys.exit('no error for ' + name)\n"
        "try:\n"
        "    asyncio.run(agent_sessions.open_session('postgresql+asyncpg://u@h/db', 's'))\n"
        "except MissingDependencyError as exc:\n"
        "    assert 'agent-sessions-store[postgres]' in str(exc), exc\n"
        "else:\n"
        "    sys.exit('no error for postgresql+asyncpg://')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- driver errors -------------------------------------------------------------------------------


def _with_path(url: str, user: str | None = None, database: str | None = None) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if user is not None:
        parsed = parsed.set(username=user)
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


@pytest.mark.asyncio
@pytest.mark.parametrize("server", ["postgres", "mariadb"])
@pytest.mark.parametrize("wrong", ["user", "database"])
async def test_refused_connection_is_wrapped_with_a_hint(server: str, wrong: str) -> None:
    base = POSTGRES_URL if server == "postgres" else MARIADB_URL
    require_server(server, "127.0.0.1", 5432 if server == "postgres" else 3306)
    url = (
        _with_path(base, user=f"nouser{RUN}")
        if wrong == "user"
        else _with_path(base, database=f"nodb{RUN}")
    )
    session = await open_session(url, "s", table_prefix=f"api{RUN}_")
    try:
        with pytest.raises(BackendUnavailableError) as info:
            await session.get_items()
    finally:
        await session.close()
    message = str(info.value)
    assert "refused the connection" in message
    assert "check the user, password and database name" in message
    expected = "wrong user or password" if wrong == "user" else "the database does not exist"
    assert expected in message


@pytest.mark.asyncio
async def test_postgres_alias_url_opens_a_session(sql_prefix: str) -> None:
    require_server("postgres", "127.0.0.1", 5432)
    plain = POSTGRES_URL.replace("postgresql+asyncpg://", "postgres://")
    async with await open_session(plain, f"a-{RUN}", table_prefix=sql_prefix) as s:
        await s.add_items([{"role": "user", "content": "via postgres://"}])
        assert len(await s.get_items()) == 1
        await s.clear_session()


@pytest.mark.asyncio
async def test_mariadb_non_utf8mb4_connection_is_refused_before_writing() -> None:
    require_server("mariadb", "127.0.0.1", 3306)
    url = MARIADB_URL + ("&" if "?" in MARIADB_URL else "?") + "charset=latin1"
    session = await open_session(url, "s", table_prefix=f"api{RUN}_", create_tables=False)
    try:
        with pytest.raises(ValueError, match=r"items need utf8mb4.*charset=utf8mb4"):
            await session.add_items([{"role": "user", "content": "snowman \u2603"}])
    finally:
        await session.close()


# -- one Redis pool per URL ----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_many_open_session_calls_on_one_redis_url_share_one_pool() -> None:
    require_server("redis", "127.0.0.1", 6379)
    from redis.asyncio import Redis

    from agent_sessions import RedisSession

    name = f"api-pool-{RUN}"
    prefix = f"api{RUN}"
    raw = Redis.from_url(REDIS_URL, decode_responses=True)

    async def connections() -> int:
        return sum(1 for c in await raw.client_list() if c["name"] == name)

    sessions = [
        await open_session(
            REDIS_URL, f"s{i}", key_prefix=prefix, redis_kwargs={"client_name": name}
        )
        for i in range(50)
    ]
    try:
        clients = {id(s.client) for s in sessions if isinstance(s, RedisSession)}
        assert len(clients) == 1
        for s in sessions:
            await s.get_items()
        assert await connections() == 1
        other = await open_session(REDIS_URL, "t", key_prefix=prefix, timeout=2.0)
        assert isinstance(other, RedisSession) and id(other.client) not in clients
        await other.close()
        for s in sessions[:-1]:
            await s.close()
        assert await sessions[-1].get_items() == []  # the pool outlives the others
        await sessions[-1].close()
        for _ in range(100):  # the server notices the closed socket a moment later
            if await connections() == 0:
                break
            await asyncio.sleep(0.02)
        assert await connections() == 0, "the last close closes the shared pool"
    finally:
        for s in sessions:
            await s.close()
        await raw.aclose()


def test_missing_dependency_error_is_an_import_error() -> None:
    assert issubclass(MissingDependencyError, ImportError)


@pytest.mark.asyncio
async def test_open_store_names_what_it_cannot_open() -> None:
    from agent_sessions import open_store
    from agent_sessions.errors import UnknownSchemeError

    with pytest.raises(UnknownSchemeError, match="bare"):
        await open_store("bare://x")
    with pytest.raises(UnknownSchemeError, match=r"sdk\+redis.*no store"):
        await open_store("sdk+redis://localhost")
    store = await open_store("sqlite:///:memory:")
    async with store.session("s") as session:
        await session.add_items([{"role": "user", "content": "x"}])
        assert len(await store.session("s").get_items()) == 1
    await store.close()
