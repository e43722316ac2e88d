"""Reaching the real servers tests need: fail under CI=true when one is missing, else skip."""

from __future__ import annotations

import os
import socket

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "AGENT_SESSIONS_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "AGENT_SESSIONS_MARIADB_URL", "mysql+asyncmy://root@127.0.0.1:3306/test"
)
MONGODB_URL = os.environ.get("AGENT_SESSIONS_MONGODB_URL")


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
