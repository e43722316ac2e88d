"""Optional OpenTelemetry spans (the ``otel`` extra): after ``instrument()``, a task's outermost
storage call runs in a span ``"{operation} {system}"`` (docs/observability.md); before, the
:func:`traced` seam costs one variable check."""

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
    if name in _SYSTEMS:
        return _SYSTEMS[name]
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
            span.set_attributes(
                {
                    "db.system.name": system,
                    "db.operation.name": operation,
                    "agent_sessions.backend": type(session).__name__,
                }
            )
            try:
                result = await method(*args, **kwargs)
            except BaseException as exc:
                # The type and a fixed text only: a message may name the session (often a
                # user) or, from a driver, quote stored data.
                kind = type(exc).__qualname__
                span.set_attribute("error.type", kind)
                span.add_event("exception", {"exception.type": kind, "exception.message": WITHHELD})
                span.set_status(Status(StatusCode.ERROR, kind))
                raise
            names = ("agent_sessions.item_count", "agent_sessions.bytes")
            measured = zip(names, _measure(operation, written, result), strict=True)
            span.set_attributes({name: value for name, value in measured if value is not None})
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
    try:
        version: str | None = importlib.metadata.version("agent-sessions-store")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        version = None
    _tracer = trace.get_tracer("agent_sessions", version, tracer_provider=tracer_provider)


def uninstrument() -> None:
    """Stop tracing."""
    global _tracer
    _tracer = None


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return _tracer is not None


__all__ = ["WITHHELD", "instrument", "is_instrumented", "traced", "uninstrument"]
