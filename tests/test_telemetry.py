"""OpenTelemetry spans: one per storage operation, with sizes and counts, never content."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_sessions import InMemorySession, SQLiteSession, telemetry
from agent_sessions.core.base import BaseSession, Row
from agent_sessions.errors import InvalidItemError

SECRET = "the-secret-content-\u00e9"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        telemetry.uninstrument()


@pytest.mark.asyncio
async def test_each_operation_is_one_span_with_counts_and_bytes(
    spans: InMemorySpanExporter,
) -> None:
    async with SQLiteSession("otel-user-42") as session:
        await session.add_items(
            [{"role": "user", "content": SECRET}, {"role": "user", "content": "b"}]
        )
        assert len(await session.get_items()) == 2
        assert await session.pop_item() is not None
        assert await session.count_items() == 1
        await session.clear_session()
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    assert names == [
        "add_items sqlite",
        "get_items sqlite",
        "pop_item sqlite",
        "count_items sqlite",
        "clear_session sqlite",
    ]
    add, get, pop, count, _ = (dict(s.attributes or {}) for s in finished)
    written = sum(
        len(payload.encode())
        for payload in (
            '{"role":"user","content":"' + SECRET + '"}',
            '{"role":"user","content":"b"}',
        )
    )
    assert add["agent_sessions.item_count"] == 2
    assert add["agent_sessions.bytes"] == written
    assert add["db.system.name"] == "sqlite" and add["db.operation.name"] == "add_items"
    assert add["agent_sessions.backend"] == "SQLiteSession"
    assert get["agent_sessions.item_count"] == 2 and get["agent_sessions.bytes"] == written
    assert pop["agent_sessions.item_count"] == 1
    assert count["agent_sessions.item_count"] == 1
    for span in finished:
        text = repr(dict(span.attributes or {})) + span.name + repr(span.events)
        assert SECRET not in text and "the-secret" not in text
        assert "otel-user-42" not in text, "the session id stays out of spans"


@pytest.mark.asyncio
async def test_a_failing_operation_records_the_error_type(
    spans: InMemorySpanExporter,
) -> None:
    class Broken(InMemorySession):
        async def _load(
            self, limit: int | None, after: int | None = None, before: int | None = None
        ) -> list[Row]:
            raise ConnectionError("store down")

    session = Broken("s")  # defined after instrument(): wrapped as it is created
    with pytest.raises(ConnectionError):
        await session.get_items()
    (span,) = spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "ConnectionError"
    # refused before reaching the store: no span
    with pytest.raises(InvalidItemError):
        await session.add_items([{"bad": float("nan")}])  # type: ignore[list-item]
    assert len(spans.get_finished_spans()) == 1


@pytest.mark.asyncio
async def test_uninstrument_restores_the_original_hooks(spans: InMemorySpanExporter) -> None:
    assert telemetry.is_instrumented()
    telemetry.uninstrument()
    assert not telemetry.is_instrumented()
    for cls in (BaseSession, InMemorySession, SQLiteSession):
        for name in ("_append", "_load", "_pop"):
            hook = cls.__dict__.get(name)
            assert hook is None or not hasattr(hook, "__agent_sessions_traced__")
    session = InMemorySession("s")
    await session.add_items([{"role": "user", "content": "x"}])
    assert spans.get_finished_spans() == ()


def test_without_opentelemetry_instrument_names_the_extra() -> None:
    code = (
        "import sys\n"
        "from agent_sessions import telemetry\n"
        "for name in [m for m in sys.modules if m.startswith('opentelemetry')]:\n"
        "    del sys.modules[name]\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from agent_sessions import telemetry\n"
        "from agent_sessions.errors import MissingDependencyError\n"
        "try:\n"
        "    telemetry.instrument()\n"
        "except MissingDependencyError as exc:\n"
        "    assert 'agent-sessions-store[otel]' in str(exc), exc\n"
        "else:\n"
        "    sys.exit('no error')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _span_text(exporter: InMemorySpanExporter) -> str:
    return "".join(
        s.name
        + repr(dict(s.attributes or {}))
        + repr(s.status.description)
        + repr([(e.name, dict(e.attributes or {})) for e in s.events])
        for s in exporter.get_finished_spans()
    )


@pytest.mark.asyncio
async def test_a_failure_span_holds_the_type_and_a_fixed_text_not_the_message(
    spans: InMemorySpanExporter,
) -> None:
    class Broken(InMemorySession):
        async def _load(
            self, limit: int | None, after: int | None = None, before: int | None = None
        ) -> list[Row]:
            raise ConnectionError(f"session {self.session_id} row {SECRET}")

    session = Broken("otel-user-7")
    with pytest.raises(ConnectionError):
        await session.get_items()
    (span,) = spans.get_finished_spans()
    (event,) = span.events
    assert event.name == "exception"
    assert dict(event.attributes or {}) == {
        "exception.type": "ConnectionError",
        "exception.message": telemetry.WITHHELD,
    }
    text = _span_text(spans)
    assert SECRET not in text and "otel-user-7" not in text


@pytest.mark.asyncio
async def test_a_redis_member_we_did_not_write_is_named_by_place_not_content(
    spans: InMemorySpanExporter,
) -> None:
    import uuid
    from urllib.parse import urlsplit

    from redis.asyncio import Redis

    from agent_sessions import RedisSession
    from agent_sessions.errors import BackendDataError

    from .servers import REDIS_URL, require_server

    parts = urlsplit(REDIS_URL)
    require_server("Redis", parts.hostname or "127.0.0.1", parts.port or 6379)
    raw = Redis.from_url(REDIS_URL)
    session = RedisSession.from_url(
        "otel-user-9", url=REDIS_URL, key_prefix=f"leaks_otel{uuid.uuid4().hex[:8]}"
    )
    try:
        await session.add_items([{"role": "user", "content": "mine"}])
        await raw.zadd(session.keys[0], {"x17:SECRET-CONTENT": 0})
        with pytest.raises(BackendDataError, match="did not write") as info:
            await session.get_items()
        assert "SECRET" not in str(info.value) and "member 0 of the 2" in str(info.value)
        text = _span_text(spans)
        assert "SECRET" not in text and "otel-user-9" not in text
    finally:
        await raw.delete(*session.keys)
        await session.close()
        await raw.aclose()
