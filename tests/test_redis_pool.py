"""Waiting for a free pooled connection (issue 39 item 7): redis-py's BlockingConnectionPool
for the clients ``from_url`` builds, this package's retry for pools that cannot wait."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis.asyncio import ConnectionPool, Redis

from agent_sessions.backends.redis import RedisSession
from agent_sessions.errors import BackendUnavailableError
from tests.servers import REDIS_URL, RUN, drop_redis_keys, require_server

PREFIX = f"agent_sessions_test{RUN}pool"
TIMEOUT = 2.0
"""Long enough for twenty callers to take turns on one connection on a loaded 2-core machine
(0.5 s starved one of them in a full run)."""
pytestmark = pytest.mark.server


@pytest.fixture(autouse=True)
def _redis_up() -> None:
    parts = urlsplit(REDIS_URL)
    require_server("Redis", parts.hostname or "127.0.0.1", parts.port or 6379)


@pytest.fixture(scope="module", autouse=True)
def _drop_keys_at_end() -> Iterator[None]:
    yield  # clear_session keeps each session's counter
    with contextlib.suppress(Exception):  # a server that was down has nothing to drop
        asyncio.run(drop_redis_keys(REDIS_URL, f"{PREFIX}:*"))


def msg(text: str) -> Any:
    return {"role": "user", "content": text}


async def _held_then_freed(session: RedisSession, pool: Any) -> None:
    """A call waits while the pool's only connection is held and runs once it is freed; held
    past ``timeout``, a call raises BackendUnavailableError."""
    held = await pool.get_connection()
    call = asyncio.create_task(session.add_items([msg("waited")]))
    await asyncio.sleep(0.1)
    assert not call.done(), "the call waits for the held connection"
    await pool.release(held)
    await call
    held = await pool.get_connection()
    started = time.monotonic()
    try:
        with pytest.raises(BackendUnavailableError, match="no free pooled connection"):
            await session.get_items()
    finally:
        await pool.release(held)
    assert time.monotonic() - started >= TIMEOUT - 0.05
    burst = [session.add_items([msg(str(i))]) for i in range(20)]
    await asyncio.gather(*burst)  # one connection, twenty callers: each waits its turn
    assert await session.count_items() == 21
    await session.clear_session()


@pytest.mark.asyncio
async def test_a_call_waits_for_a_free_pooled_connection_then_raises() -> None:
    session = RedisSession.from_url(
        f"pool-{uuid.uuid4().hex[:12]}",
        url=REDIS_URL,
        key_prefix=PREFIX,
        timeout=TIMEOUT,
        redis_kwargs={"max_connections": 1},
    )
    try:
        await _held_then_freed(session, session.client.connection_pool)  # type: ignore[union-attr]
    finally:
        await session.close()


@pytest.mark.asyncio
async def test_a_full_pool_that_cannot_wait_is_retried_until_timeout() -> None:
    pool = ConnectionPool.from_url(REDIS_URL, max_connections=1)  # raises when full
    client = Redis(connection_pool=pool)
    session = RedisSession(
        f"pool-{uuid.uuid4().hex[:12]}", client=client, key_prefix=PREFIX, timeout=TIMEOUT
    )
    try:
        await _held_then_freed(session, pool)
    finally:
        await session.close()
        await client.aclose()  # leaves a pool passed in open: the caller owns it
        await pool.aclose()  # left open, its connection warned unclosed at the next gc (issue 41)
