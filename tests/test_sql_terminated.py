"""Issue 23 item 10: a pooled asyncpg connection that received the server's termination notice
(pg_terminate_backend) before its socket closed is dropped, and the operation, which asyncpg
refused to send on it, runs on another connection: the caller sees no error and nothing twice.

A proxy of this module forwards the server's notice at once and holds the end of the stream
back until the test is done, which opens that window for as long as the test needs it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from agent_sessions.backends.sqlalchemy import SQLAlchemySession
from tests.servers import POSTGRES_URL, require_server

pytestmark = pytest.mark.server


class _HoldingProxy:
    """Forwards bytes both ways; the server's end of a stream reaches the client only when
    ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.server_closed = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, from_server: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        if from_server:
            self.server_closed.set()
            await self.release.wait()
        writer.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", 5432)
        await asyncio.gather(
            self._pipe(client_r, server_w, False), self._pipe(server_r, client_w, True)
        )

    async def close(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.close()


@pytest_asyncio.fixture
async def proxied() -> AsyncIterator[tuple[SQLAlchemySession, _HoldingProxy, str]]:
    require_server("PostgreSQL", "127.0.0.1", 5432)
    proxy = _HoldingProxy()
    port = await proxy.start()
    app, prefix = f"as-term-{uuid.uuid4().hex[:8]}", f"tm{uuid.uuid4().hex[:8]}_"
    session = SQLAlchemySession.from_url(
        "conv",
        url=POSTGRES_URL.replace("127.0.0.1:5432", f"127.0.0.1:{port}"),
        table_prefix=prefix,
        engine_kwargs={"connect_args": {"server_settings": {"application_name": app}}},
    )
    try:
        yield session, proxy, app
    finally:
        await proxy.close()
        await session.close()
        import asyncpg  # type: ignore[import-untyped]

        admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg", "postgresql"))
        try:
            for table in ("messages", "sessions", "schema"):
                await admin.execute(f"DROP TABLE IF EXISTS {prefix}{table}")
        finally:
            await admin.close()


async def _terminate(app: str) -> int:
    import asyncpg

    admin = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg", "postgresql"))
    try:
        rows = await admin.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            app,
        )
    finally:
        await admin.close()
    return len(rows)


@pytest.mark.asyncio
async def test_a_connection_terminated_in_the_pool_costs_no_failed_operation(
    proxied: tuple[SQLAlchemySession, _HoldingProxy, str],
) -> None:
    session, proxy, app = proxied
    await session.add_items([{"role": "user", "content": "before"}])
    assert await _terminate(app) >= 1
    await proxy.server_closed.wait()  # the notice was forwarded; the socket stays open
    for _ in range(5):
        await asyncio.sleep(0)  # let the client read the notice
    await session.add_items([{"role": "user", "content": "after"}])
    assert [i["content"] for i in await session.get_items()] == ["before", "after"]  # type: ignore[typeddict-item]
