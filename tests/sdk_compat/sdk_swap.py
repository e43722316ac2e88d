"""pytest plugin: the SDK's own session tests, with agent_sessions' classes under the SDK's names.

Loaded as ``-p sdk_swap`` by ``tests/test_sdk_suite.py`` in a pytest subprocess whose root is
the SDK's extracted test tree (its ``tests`` package must not meet ours). At start-up it
replaces the SDK's session classes in every module the tests import them from; a test module
binds the names at import, after this. ``AGENT_SESSIONS_SDK_TARGET`` picks the store the SQL
and Redis tests reach (``sqlite``, ``redis``, ``redis-fake``, ``postgres``, ``mariadb``); on a
server each test gets its own schema (PostgreSQL), database (MariaDB) or key prefix (Redis); on
``redis-fake`` the Redis file runs on the fakeredis clients it builds. In the MongoDB
file, the file's fake client becomes mongomock-motor's (a real client and per-test databases
with ``AGENT_SESSIONS_MONGODB_URL``; see ``_mongodb_target``). Excluded tests
(``exclusions.py``) are skipped with their reason; the outcome of every test is written as JSON
to ``AGENT_SESSIONS_SDK_REPORT``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import multiprocessing.forkserver
import os
import re
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import exclusions  # type: ignore[import-not-found]  # tests/sdk_compat/exclusions.py
import pytest

TARGET = os.environ.get("AGENT_SESSIONS_SDK_TARGET", "sqlite")
REPORT = os.environ.get("AGENT_SESSIONS_SDK_REPORT")
REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "AGENT_SESSIONS_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "AGENT_SESSIONS_MARIADB_URL", "mysql+asyncmy://root@127.0.0.1:3306/test"
)
_RUN = uuid.uuid4().hex[:8]

# The SDK's Redis file uses fakeredis for every test when it can import it. On ``redis`` it
# must reach the real server, so fakeredis is hidden before the file imports (its tests that
# need fakeredis skip); ``redis-fake`` runs the file on fakeredis.
if TARGET == "redis":
    sys.modules["fakeredis"] = None  # type: ignore[assignment]  # import raises ImportError
elif TARGET == "redis-fake":
    for _needed in ("fakeredis", "lupa"):  # lupa: fakeredis runs our Lua scripts with it
        if importlib.util.find_spec(_needed) is None:
            raise RuntimeError(f"target redis-fake needs {_needed}: install the dev extra")

# SDK module -> {name in that module: (our module, our name)}
SWAPS: dict[str, dict[str, tuple[str, str]]] = {
    "agents": {"SQLiteSession": ("agent_sessions", "SQLiteSession")},
    "agents.memory": {"SQLiteSession": ("agent_sessions", "SQLiteSession")},
    "agents.memory.sqlite_session": {"SQLiteSession": ("agent_sessions", "SQLiteSession")},
    "agents.extensions.memory": {
        "EncryptedSession": ("agent_sessions", "EncryptedSession"),
        "SQLAlchemySession": ("agent_sessions", "SQLAlchemySession"),
        "RedisSession": ("agent_sessions", "RedisSession"),
        "MongoDBSession": ("agent_sessions", "MongoDBSession"),
        "AdvancedSQLiteSession": ("agent_sessions", "AdvancedSQLiteSession"),
        "AsyncSQLiteSession": ("agent_sessions", "AsyncSQLiteSession"),
    },
    "agents.extensions.memory.encrypt_session": {
        "EncryptedSession": ("agent_sessions", "EncryptedSession")
    },
    "agents.extensions.memory.sqlalchemy_session": {
        "SQLAlchemySession": ("agent_sessions", "SQLAlchemySession")
    },
    "agents.extensions.memory.redis_session": {"RedisSession": ("agent_sessions", "RedisSession")},
    "agents.extensions.memory.mongodb_session": {
        "MongoDBSession": ("agent_sessions", "MongoDBSession")
    },
    "agents.extensions.memory.advanced_sqlite_session": {
        "AdvancedSQLiteSession": ("agent_sessions", "AdvancedSQLiteSession")
    },
    "agents.extensions.memory.async_sqlite_session": {
        "AsyncSQLiteSession": ("agent_sessions", "AsyncSQLiteSession")
    },
}


def swap_classes() -> list[str]:
    """Put our classes under the SDK's names; return what could not be swapped (and why)."""
    missing = []
    for sdk_module, names in SWAPS.items():
        try:
            module = importlib.import_module(sdk_module)
        except ImportError as exc:
            missing.append(f"{sdk_module}: {exc}")
            continue
        for name, (ours, our_name) in names.items():
            try:
                value = getattr(importlib.import_module(ours), our_name)
            except (ImportError, AttributeError) as exc:
                missing.append(f"{sdk_module}.{name}: {exc}")
                continue
            setattr(module, name, value)
    return missing


_MISSING = swap_classes()

# The SDK's encryption tests move the clock with ``monkeypatch.setattr(
# "cryptography.fernet.time.time", ...)``: before cryptography 51, ``fernet.py`` imported the
# ``time`` module, so that patched ``time.time`` for everything. cryptography 51 moved Fernet
# to Rust and the path no longer resolves; point it at the same module so the tests keep
# their meaning on any cryptography version.
try:
    import cryptography.fernet as _fernet
except ImportError:  # the encryption extra is absent: those tests skip
    pass
else:
    if not hasattr(_fernet, "time"):
        import time as _time

        _fernet.time = _time  # type: ignore[attr-defined]

# The SDK's MongoDB test module installs fake pymongo submodules in sys.modules when it is
# imported; the real ones are put back after collection (see _restore_pymongo).
_PYMONGO = {
    name: module
    for name, module in sys.modules.items()
    if name == "pymongo" or name.startswith("pymongo.")
}

# Worker processes the SDK's tests start (forkserver) import the test module afresh: swap there
# too, or they would run the SDK's own classes against our stores.
multiprocessing.forkserver.set_forkserver_preload(["__main__", "sdk_swap"])


# -- exclusions and the outcome report ----------------------------------------------------------

_outcomes: dict[str, str] = {}
_messages: dict[str, str] = {}
_used: set[str] = set()


def _exclusion(nodeid: str) -> tuple[str, str] | None:
    """Return (key, reason) of the exclusion covering ``nodeid`` (``file::test`` or
    ``file::test[param]``; a key without a parameter covers every parametrisation)."""
    path, _, name = nodeid.partition("::")
    key = f"{os.path.basename(path)}::{name}"
    file_key = f"{os.path.basename(path)}::*"
    tables = (exclusions.BY_TARGET.get(TARGET, {}), exclusions.EXCLUDED, exclusions.DIFFERENCES)
    for table in tables:
        for candidate in (key, key.split("[", 1)[0], file_key):
            if candidate in table:
                return candidate, table[candidate]
    return None


def _restore_pymongo() -> None:
    """Put the real pymongo submodules back where the SDK's MongoDB test module put fakes (it
    needs them only at its import): the stand-in client and PyMongo import from them later."""
    for name in [n for n in sys.modules if n == "pymongo" or n.startswith("pymongo.")]:
        if name not in _PYMONGO and getattr(sys.modules[name], "__file__", None) is None:
            del sys.modules[name]  # a fake the file made (a real module has a file)
    sys.modules.update(_PYMONGO)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _restore_pymongo()
    for item in items:
        found = _exclusion(item.nodeid)
        if found is not None:
            _used.add(found[0])
            item.add_marker(pytest.mark.skip(reason=f"excluded: {found[1]}"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        previous = _outcomes.get(report.nodeid)
        if previous in ("failed", "error"):
            return
        outcome: str = report.outcome
        if report.when != "call" and report.outcome == "failed":
            outcome = "error"
        if outcome == "skipped":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            outcome = "excluded" if str(reason).startswith("Skipped: excluded:") else "skipped"
        _outcomes[report.nodeid] = outcome
        crash = getattr(report.longrepr, "reprcrash", None)
        if outcome in ("failed", "error") and crash is not None:
            _messages[report.nodeid] = f"{os.path.basename(crash.path)}:{crash.lineno}: " + (
                crash.message.splitlines()[0][:200] if crash.message else ""
            )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if REPORT is None:
        return
    files = {os.path.basename(str(arg).split("::")[0]) for arg in session.config.args}
    keys = {
        key
        for table in (
            exclusions.EXCLUDED,
            exclusions.DIFFERENCES,
            exclusions.BY_TARGET.get(TARGET, {}),
        )
        for key in table
        if key.split("::")[0] in files
    }
    with open(REPORT, "w", encoding="utf-8") as out:
        json.dump(
            {
                "target": TARGET,
                "outcomes": _outcomes,
                "messages": _messages,
                "unused_exclusions": sorted(keys - _used),
                "not_swapped": _MISSING,
            },
            out,
            indent=1,
        )


# -- pointing the SQL and Redis tests at the target's server ------------------------------------

_SQL_TEST_MODULES = ("test_sqlalchemy_session", "test_sqlalchemy_compaction")
_SQLITE_URL = re.compile(r"^sqlite(\+aiosqlite)?://")


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _admin(url: str, statements: list[str]) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


@pytest.fixture(autouse=True)
def _sql_target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """On postgres/mariadb, send every SQLite URL an SQL test opens to this test's own schema
    or database on the server (the SDK's tests use SQLite files and ``:memory:``)."""
    module = request.module
    is_sql = module.__name__.rsplit(".", 1)[-1] in _SQL_TEST_MODULES
    if TARGET not in ("postgres", "mariadb") or not is_sql:
        yield
        return
    from sqlalchemy.engine import make_url

    name = f"sdk_{_RUN}_{uuid.uuid4().hex[:8]}"
    if TARGET == "postgres":
        base = POSTGRES_URL
        _run(_admin(base, [f'CREATE SCHEMA "{name}"']))
        url = base
        engine_kwargs: dict[str, Any] = {"connect_args": {"server_settings": {"search_path": name}}}
        drop = [f'DROP SCHEMA "{name}" CASCADE']
    else:
        base = MARIADB_URL
        _run(_admin(base, [f"CREATE DATABASE `{name}`"]))
        url = make_url(base).set(database=name).render_as_string(hide_password=False)
        engine_kwargs = {}
        drop = [f"DROP DATABASE `{name}`"]

    from sqlalchemy.ext import asyncio as sa_asyncio

    from agent_sessions import SQLAlchemySession

    real_create = sa_asyncio.create_async_engine
    real_from_url = SQLAlchemySession.from_url.__func__  # type: ignore[attr-defined]

    def create_async_engine(engine_url: Any, **kwargs: Any) -> Any:
        if _SQLITE_URL.match(str(engine_url)):
            merged = {**engine_kwargs, **kwargs}
            merged.pop("poolclass", None)
            return real_create(url, **merged)
        return real_create(engine_url, **kwargs)

    def from_url(cls: Any, /, *args: Any, url: str, **kwargs: Any) -> Any:
        if _SQLITE_URL.match(url):
            if engine_kwargs:
                extra = dict(kwargs.get("engine_kwargs") or {})
                extra.update(engine_kwargs)
                kwargs["engine_kwargs"] = extra
            url = target_url
        return real_from_url(cls, *args, url=url, **kwargs)

    target_url = url
    monkeypatch.setattr(SQLAlchemySession, "from_url", classmethod(from_url))
    if hasattr(module, "create_async_engine"):
        monkeypatch.setattr(module, "create_async_engine", create_async_engine)
    # The module's DB_URL stays a SQLite URL: from_url and create_async_engine redirect it
    # (with this test's schema on PostgreSQL).
    try:
        yield
    finally:
        try:
            _run(_admin(base, drop))
        except Exception as exc:  # leave it; a later run's name differs
            print(f"sdk_swap: could not drop {name}: {exc}")


@pytest.fixture(autouse=True)
def _redis_target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the Redis tests (which fall back to a real server without fakeredis, i.e. on
    target ``redis``) at the configured Redis; their key prefixes (``test:``) get the test
    run's tag appended, so the run's guard (tests/conftest.py) removes what they leave."""
    module = request.module
    if hasattr(module, "REDIS_URL") and not getattr(module, "USE_FAKE_REDIS", False):
        base = REDIS_URL.rsplit("/", 1)[0] if REDIS_URL.count("/") > 2 else REDIS_URL
        monkeypatch.setattr(module, "REDIS_URL", f"{base}/15")
        tag = os.environ.get("AGENT_SESSIONS_TEST_RUN", "")

        class TaggedRedisSession(module.RedisSession):  # type: ignore[misc, name-defined]
            def __init__(self, *args: Any, key_prefix: str = "agent_sessions", **kw: Any):
                super().__init__(*args, key_prefix=f"{key_prefix}{tag}", **kw)

        monkeypatch.setattr(module, "RedisSession", TaggedRedisSession)


# -- the MongoDB tests: a faithful stand-in for the file's fake client -------------------------

MONGODB_URL = os.environ.get("AGENT_SESSIONS_MONGODB_URL")


class _IndexStateReset:
    """Stands for the SDK's class-level ``MongoDBSession._init_state`` (its record of which
    clients had their indexes created), which the file clears before building sessions:
    clearing it makes ours forget the same."""

    def clear(self) -> None:
        from agent_sessions.backends.mongodb.session import _INDEXES

        _INDEXES.clear()


@pytest.fixture(autouse=True)
def _mongodb_target(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """In the SDK's MongoDB file, make ``FakeAsyncMongoClient()`` return mongomock-motor's
    ``AsyncMongoMockClient`` (a fresh in-memory server each, as the fake), or with
    ``AGENT_SESSIONS_MONGODB_URL`` a real ``AsyncMongoClient`` whose databases are this test's
    own; route our ``from_uri`` through the SDK module's ``AsyncMongoClient`` name, which the
    file patches; and give ``MongoDBSession._init_state.clear()`` our registry's meaning."""
    module = request.module
    if not hasattr(module, "FakeAsyncMongoClient"):
        yield
        return
    import agents.extensions.memory.mongodb_session as sdk_mongodb
    from pymongo.driver_info import DriverInfo

    import agent_sessions.backends.mongodb.session as ours

    prefix = f"sdk{_RUN}{uuid.uuid4().hex[:6]}_"
    databases: set[str] = set()
    if MONGODB_URL:
        from pymongo import AsyncMongoClient

        class ScopedClient(AsyncMongoClient):  # type: ignore[type-arg]
            """A real client whose database names carry this test's prefix."""

            def __getitem__(self, name: str) -> Any:
                return self.get_database(name)

            def get_database(self, name: Any = None, *args: Any, **kwargs: Any) -> Any:
                if name != "admin":  # ping() runs on admin
                    name = f"{prefix}{name or 'default'}"
                    databases.add(name)
                return super().get_database(name, *args, **kwargs)

        def client(*args: Any, **kwargs: Any) -> Any:
            return ScopedClient(MONGODB_URL, serverSelectionTimeoutMS=3000)

    else:
        from mongomock_motor import AsyncMongoMockClient

        def client(*args: Any, **kwargs: Any) -> Any:
            return AsyncMongoMockClient()

    monkeypatch.setattr(module, "FakeAsyncMongoClient", client)
    monkeypatch.setattr(module, "FakeDriverInfo", DriverInfo)
    monkeypatch.setattr(module.MongoDBSession, "_init_state", _IndexStateReset(), raising=False)
    # Looked up at each call: the file patches the SDK module's name to a mock or a factory.
    monkeypatch.setattr(
        ours,
        "AsyncMongoClient",
        lambda *a, **k: sdk_mongodb.AsyncMongoClient(*a, **k),  # type: ignore[attr-defined]
    )
    try:
        yield
    finally:
        if databases:
            from pymongo import MongoClient

            admin: Any = MongoClient(MONGODB_URL, serverSelectionTimeoutMS=3000)
            try:
                for name in databases:
                    admin.drop_database(name)
            finally:
                admin.close()
