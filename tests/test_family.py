"""The rewrite and family tiers (issue 12's defects 1, 4 and 5) over SQLite, Redis, PostgreSQL
and memory; the MongoDB stand-in for rewrite in place."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from agents.memory import Session

from agent_sessions.testing.family import FamilyConformance, RewriteConformance
from tests.matrix import BACKENDS, REDIS_PREFIX, SQL_URLS, Backend
from tests.servers import REDIS_URL, drop_redis_keys
from tests.test_matrix import _drop_sql_tables


@pytest.fixture(scope="module", autouse=True)
def _drop_leftovers_at_end() -> Iterator[None]:
    """Side stores and the family registry outlive ``clear_session`` of the user's session."""
    yield
    for url in SQL_URLS.values():
        with contextlib.suppress(Exception):
            asyncio.run(_drop_sql_tables(url))
    with contextlib.suppress(Exception):
        asyncio.run(drop_redis_keys(REDIS_URL, f"{REDIS_PREFIX}*"))


class _Tiers(RewriteConformance, FamilyConformance):
    backend: Backend

    async def create_session(self, session_id: str) -> Session:
        if self.backend.needs is not None:
            self.backend.needs()
        return await self.backend.open(session_id)


class _RewriteOnly(RewriteConformance):
    backend: Backend

    async def create_session(self, session_id: str) -> Session:
        return await self.backend.open(session_id)


_FAMILY_BACKENDS = {"memory", "sqlite", "redis", "postgres"}

for _backend in BACKENDS:
    _base: Any = _Tiers if _backend.name in _FAMILY_BACKENDS else _RewriteOnly
    _name = "Test_" + _backend.name.replace("-", "_")
    globals()[_name] = type(_name, (_base,), {"backend": _backend})
