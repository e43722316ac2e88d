"""Optional OpenTelemetry spans for every storage operation (the ``otel`` extra).

The public storage methods of ``BaseSession`` (the SDK's four, ``count_items``,
``delete_items`` and the sequenced reads and writes layers use) pass through one seam,
:func:`traced`. Until ``instrument()`` is called the seam only checks a module variable and
awaits the method (no span), and OpenTelemetry is never imported. Once
called, the outermost such call of a task runs in a span; calls it makes on other sessions
(a family's side stores) are part of it. Every backend built on ``BaseSession`` is traced,
including your own, unless it overrides a public method without calling ``super()``.

A span is named ``"{operation} {system}"`` (e.g. ``"add_items redis"``) and carries:

- ``db.system.name``: ``sqlite``, ``redis``, ``postgresql``, ``mysql``, ``mariadb``,
  ``mongodb``, ``memory`` (or the class name, lower-cased, of another backend);
- ``db.operation.name``: ``add_items``, ``get_items``, ``pop_item``, ``clear_session``,
  ``count_items`` or ``delete_items``;
- ``agent_sessions.backend``: the session's class name;
- ``agent_sessions.item_count``: items written, read, popped, counted or deleted;
- ``agent_sessions.bytes``: UTF-8 bytes of the items' JSON written or read (what the store
  holds: ciphertext envelopes under ``EncryptedSession``);
- on failure, ``error.type`` and an ``exception`` event with ``exception.type`` and a fixed
  ``exception.message`` (the real message may name the session or quote a driver's view of
  stored data; it reaches the caller, not the span), with status ERROR.

Never the content of an item, nor an exception's message, and not the session id (it often
names a user).
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from .codec import DEFAULT_MAX_ITEM_BYTES, encode_batch
from .codec import dumps as _dumps
from .extras import missing

P = ParamSpec("P")
R = TypeVar("R")
Method = Callable[P, Coroutine[Any, Any, R]]

_SYSTEMS = {
    "SQLiteSession": "sqlite",
    "RedisSession": "redis",
    "MongoDBSession": "mongodb",
    "InMemorySession": "memory",
}
WITHHELD = "withheld by agent_sessions (it may name the session or quote stored data)"

_tracer: Any = None
_inside: ContextVar[bool] = ContextVar("agent_sessions_span", default=False)
"""Whether the current task is inside a span of ours (nested calls make none)."""


def traced(operation: str) -> Callable[[Method[P, R]], Method[P, R]]:
    """The seam: make a session method run in an ``operation`` span while instrumented."""

    def decorate(method: Method[P, R]) -> Method[P, R]:
        @functools.wraps(method)
        async def seam(*args: P.args, **kwargs: P.kwargs) -> R:
            # A coroutine function, as the method is (mocks and the SDK inspect it).
            if _tracer is None or _inside.get():
                return await method(*args, **kwargs)
            return await _span(operation, method, args, kwargs)  # type: ignore[arg-type,no-any-return]

        return seam

    return decorate


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _system(session: object) -> str:
    name = type(session).__name__
    system = _SYSTEMS.get(name)
    if system is not None:
        return system
    engine = getattr(session, "engine", None)
    dialect = getattr(getattr(engine, "dialect", None), "name", None)
    if isinstance(dialect, str):
        if dialect == "mysql" and getattr(engine.dialect, "is_mariadb", False):  # type: ignore[union-attr]
            return "mariadb"
        return dialect
    return name.lower()


def _measure(operation: str, written: list[str], result: Any) -> tuple[int | None, int | None]:
    """Return (item count, bytes) of one call."""
    if operation == "add_items":
        return len(written), sum(map(_utf8_len, written))
    if operation == "get_items":
        items = [i[1] if isinstance(i, tuple) else i for i in result]  # sequenced: (seq, item)
        return len(items), sum(_utf8_len(_dumps(i)) for i in items)
    if operation == "pop_item":
        return (0, 0) if result is None else (1, _utf8_len(_dumps(result)))
    if isinstance(result, int):  # count_items, delete_items
        return result, None
    return None, None


async def _span(
    operation: str,
    method: Callable[..., Coroutine[Any, Any, Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    session = args[0]
    written: list[str] = []
    if operation == "add_items":
        # Refused before it reaches the store (nothing written): no span.
        items = args[1] if len(args) > 1 else kwargs["items"]
        written = encode_batch(items, getattr(session, "max_item_bytes", DEFAULT_MAX_ITEM_BYTES))
        if not written:
            return await method(*args, **kwargs)
    from opentelemetry.trace import SpanKind, Status, StatusCode

    system = _system(session)
    token = _inside.set(True)
    try:
        with _tracer.start_as_current_span(
            f"{operation} {system}",
            kind=SpanKind.CLIENT,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            span.set_attribute("db.system.name", system)
            span.set_attribute("db.operation.name", operation)
            span.set_attribute("agent_sessions.backend", type(session).__name__)
            try:
                result = await method(*args, **kwargs)
            except BaseException as exc:
                # The type and a fixed text only: a message may name the session (often a
                # user) or, from a driver, quote stored data.
                kind = type(exc).__qualname__
                span.set_attribute("error.type", kind)
                span.add_event(
                    "exception", {"exception.type": kind, "exception.message": WITHHELD}
                )
                span.set_status(Status(StatusCode.ERROR, kind))
                raise
            count, size = _measure(operation, written, result)
            if count is not None:
                span.set_attribute("agent_sessions.item_count", count)
            if size is not None:
                span.set_attribute("agent_sessions.bytes", size)
            return result
    finally:
        _inside.reset(token)


def instrument(tracer_provider: Any = None) -> None:
    """Start tracing every storage operation; idempotent.

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider``; default the global one
            (``opentelemetry.trace.set_tracer_provider``).

    Raises:
        MissingDependencyError: ``opentelemetry-api`` is not installed (the ``otel`` extra).
    """
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise missing("agent_sessions.telemetry", "otel", exc) from exc
    _tracer = trace.get_tracer("agent_sessions", _version(), tracer_provider=tracer_provider)


def _version() -> str | None:
    try:
        return importlib.metadata.version("agent-sessions-store")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return None


def uninstrument() -> None:
    """Stop tracing."""
    global _tracer
    _tracer = None


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return _tracer is not None


__all__ = ["WITHHELD", "instrument", "is_instrumented", "traced", "uninstrument"]
