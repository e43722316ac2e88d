"""The conformance kit on every backend x wrapper stack (see tests/matrix.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from agents.memory import Session

from agent_sessions import open_store
from agent_sessions.testing import SessionConformanceSuite, StoreConformance
from tests.matrix import (
    _SQLITE_DIR,
    BACKENDS,
    REDIS_PREFIX,
    SQL_PREFIX,
    SQL_URLS,
    STACKS,
    Backend,
    Stack,
    mongodb_standin_store,
    reset_standins,
)
from tests.servers import (
    MARIADB_URL,
    POSTGRES_URL,
    REDIS_URL,
    drop_redis_keys,
    drop_sql_tables,
)


@pytest.fixture(scope="module", autouse=True)
def _drop_leftovers_at_end() -> Iterator[None]:
    """Remove this run's tables and keys, including side data that clear_session keeps on
    purpose (branching keeps used branch names reserved, as the SDK does)."""
    yield
    for url in SQL_URLS.values():
        with contextlib.suppress(Exception):  # a server that was down has nothing to drop
            asyncio.run(drop_sql_tables(url, SQL_PREFIX))
    with contextlib.suppress(Exception):
        asyncio.run(drop_redis_keys(REDIS_URL, f"{REDIS_PREFIX}*"))


@pytest.fixture(autouse=True)
def _fresh_standins() -> None:
    reset_standins()


class _MatrixSuite(SessionConformanceSuite):
    backend: Backend
    stack: Stack

    async def create_session(self, session_id: str) -> Session:
        if self.backend.needs is not None:
            self.backend.needs()
        return self.stack(await self.backend.open(session_id))


def _suite_name(backend: str, stack: str) -> str:
    return "Test_" + "_".join(part.replace("-", "_") for part in (backend, stack))


ATOMIC_BACKENDS = {
    "memory",
    "sqlite",
    "redis",
    "postgres",
    "mariadb",
    "sqlalchemy-sqlite",
    "mongodb",
}
"""Stores implementing the SDK compaction session's atomic replacement (all of them; MongoDB
commits it with one document write, see ``backends/mongodb/swap.py``)."""
ATOMIC_STACKS = {"bare", "encrypted", "ttl", "encrypted-ttl"}
"""Layers that pass it through; branching, usage, compaction and resilient keep state per
item or position and decline (the SDK then clears and adds, restoring on failure)."""

for _backend in BACKENDS:
    for _stack_name, _stack in STACKS.items():
        _attrs: dict[str, Any] = {
            "backend": _backend,
            "concurrent_tasks": _backend.concurrent_tasks,
            "stack": staticmethod(_stack),
            "expects_atomic_replacement": _backend.name in ATOMIC_BACKENDS
            and _stack_name in ATOMIC_STACKS,
            # PostgreSQL's ts_rank weighs how often words occur, not how rare they are.
            "ranks_rare_words_first": _backend.name != "postgres",
        }
        _name = _suite_name(_backend.name, _stack_name)
        globals()[_name] = type(_name, (_MatrixSuite,), _attrs)


class _StoreSuite(StoreConformance):
    url: str
    needs: Any = None

    async def open_store(self) -> Any:
        if self.needs is not None:
            self.needs()
        return await open_store(self.url)


_REDIS_KEYS = {"key_prefix": REDIS_PREFIX}
STORE_SUITES: dict[str, dict[str, Any]] = {
    "memory": {"url": "memory://"},
    "sqlite": {"url": f"sqlite:///{_SQLITE_DIR}/matrix.db"},
    "redis": {"url": REDIS_URL, "session_options": _REDIS_KEYS, "catalog_options": _REDIS_KEYS},
    "mongodb": {"url": "mongodb://", "open_store": lambda self: mongodb_standin_store()},
    **{
        name: {"url": url, "open_store": lambda self: open_store(self.url, table_prefix=SQL_PREFIX)}
        for name, url in (
            ("postgres", POSTGRES_URL),
            ("mariadb", MARIADB_URL),
            ("sqlalchemy-sqlite", f"sqlite+aiosqlite:///{_SQLITE_DIR}/sqlalchemy.db"),
        )
    },
}
"""The store tier per backend URL."""

for _name, _store_attrs in STORE_SUITES.items():
    _needs = next((b.needs for b in BACKENDS if b.name == _name), None)
    _store_suite = "Test_store_" + _name
    _store_attrs["needs"] = staticmethod(_needs) if _needs else None
    globals()[_store_suite] = type(_store_suite, (_StoreSuite,), _store_attrs)
