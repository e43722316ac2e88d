"""The suite's own hygiene: it leaves the shared servers as it found them, and a failing
property test reports its minimal case before pytest's timeout ends it."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import settings
from hypothesis.internal.conjecture import engine

from tests.servers import (
    POSTGRES_URL,
    REDIS_URL,
    drop_redis_keys,
    drop_sql_tables,
    remove_run,
    require_server,
    snapshot,
)


def test_a_failing_property_test_shrinks_and_reports_within_the_pytest_timeout(
    pytestconfig: pytest.Config,
) -> None:
    # Generation gets at least as long as shrinking; the report follows the shrink.
    assert 2 * engine.MAX_SHRINKING_SECONDS <= float(pytestconfig.getini("timeout"))
    assert settings.default is not None and settings.default.print_blob


def test_removing_a_run_takes_what_carries_its_tag_and_nothing_else() -> None:
    require_server("Redis", "127.0.0.1", 6379)
    require_server("PostgreSQL", "127.0.0.1", 5432)
    tag, other = f"g{uuid.uuid4().hex[:8]}", f"h{uuid.uuid4().hex[:8]}"

    async def scenario() -> set[str]:
        from redis.asyncio import Redis
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        redis = Redis.from_url(REDIS_URL)
        await redis.set(f"x:{{{tag}}}:meta", 1)
        await redis.set(f"x:{{{other}}}:meta", 1)
        await redis.aclose()
        engine = create_async_engine(POSTGRES_URL)
        async with engine.begin() as conn:
            await conn.execute(text(f"CREATE TABLE {tag}_items (session_id TEXT)"))
            await conn.execute(text(f"CREATE TABLE {other}_items (session_id TEXT)"))
            await conn.execute(
                text(f"INSERT INTO {other}_items VALUES (:a), (:b)"), {"a": f"s-{tag}", "b": "kept"}
            )
        await engine.dispose()
        await remove_run(tag)
        return {name for name in await snapshot() if tag in name or other in name}

    try:
        left = asyncio.run(scenario())
    finally:
        asyncio.run(drop_redis_keys(REDIS_URL, f"*{other}*"))
        asyncio.run(drop_sql_tables(POSTGRES_URL, other))
    assert left == {
        f"redis/0/x:{{{other}}}:meta",
        f"postgresql/{other}_items",
        f"postgresql/{other}_items/kept",
    }
