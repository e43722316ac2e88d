"""Optional OpenTelemetry spans for every storage operation (the ``otel`` extra).

``instrument()`` wraps the storage hooks of every backend (those of ``BaseSession``
subclasses: built-in ones and your own, defined before or after the call) so each operation
that reaches the store runs in a span. Until it is called nothing is wrapped, so an
application that does not trace pays nothing, and one without OpenTelemetry installed never
imports it.

A span is named ``"{operation} {system}"`` (e.g. ``"add_items redis"``) and carries:

- ``db.system.name``: ``sqlite``, ``redis``, ``postgresql``, ``mysql``, ``mariadb``,
  ``mongodb``, ``memory`` (or the class name, lower-cased, of another backend);
- ``db.operation.name``: ``add_items``, ``get_items``, ``pop_item``, ``clear_session``,
  ``count_items`` or ``delete_items``;
- ``agent_sessions.backend``: the session's class name;
- ``agent_sessions.item_count``: items written, read, popped, counted or deleted;
- ``agent_sessions.bytes``: UTF-8 bytes of the stored JSON written or read (what the store
  holds: ciphertext envelopes under ``EncryptedSession``);
- on failure, ``error.type`` and an ``exception`` event with ``exception.type`` and a fixed
  ``exception.message`` (the real message may name the session or quote a driver's view of
  stored data; it reaches the caller, not the span), with status ERROR.

Never the content of an item, nor an exception's message, and not the session id (it often
names a user).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from .core.base import BaseSession, Row
from .core.extras import missing

_HOOKS = {
    "_append": "add_items",
    "_load": "get_items",
    "_pop": "pop_item",
    "_clear": "clear_session",
    "_count": "count_items",
    "delete_items": "delete_items",
}
_SYSTEMS = {
    "SQLiteSession": "sqlite",
    "RedisSession": "redis",
    "MongoDBSession": "mongodb",
    "InMemorySession": "memory",
}
_WRAPPED = "__agent_sessions_traced__"

_tracer: Any = None
_subclass_hook = False


def _utf8_len(text: str | bytes) -> int:
    if isinstance(text, bytes):
        return len(text)
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _system(session: BaseSession) -> str:
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


def _measure(operation: str, args: tuple[Any, ...], result: Any) -> tuple[int | None, int | None]:
    """Return (item count, bytes) of one hook call."""
    if operation == "add_items":
        payloads: list[str] = args[0] if args else []
        return len(payloads), sum(_utf8_len(p) for p in payloads)
    if operation == "get_items":
        rows: list[Row] = result
        return len(rows), sum(_utf8_len(payload) for _, payload in rows)
    if operation == "pop_item":
        return (0, 0) if result is None else (1, _utf8_len(result))
    if operation in ("count_items", "delete_items") and isinstance(result, int):
        return result, None
    return None, None


_WITHHELD = "withheld by agent_sessions (it may name the session or quote stored data)"


def _traced(operation: str, hook: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(hook)
    async def traced(self: BaseSession, *args: Any, **kwargs: Any) -> Any:
        tracer = _tracer
        if tracer is None:  # uninstrumented since this class was wrapped
            return await hook(self, *args, **kwargs)
        from opentelemetry.trace import SpanKind, Status, StatusCode

        system = _system(self)
        with tracer.start_as_current_span(
            f"{operation} {system}",
            kind=SpanKind.CLIENT,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            span.set_attribute("db.system.name", system)
            span.set_attribute("db.operation.name", operation)
            span.set_attribute("agent_sessions.backend", type(self).__name__)
            try:
                result = await hook(self, *args, **kwargs)
            except BaseException as exc:
                # The type and a fixed text only: a message may name the session (often a
                # user) or, from a driver, quote stored data.
                kind = type(exc).__qualname__
                span.set_attribute("error.type", kind)
                span.add_event(
                    "exception", {"exception.type": kind, "exception.message": _WITHHELD}
                )
                span.set_status(Status(StatusCode.ERROR, kind))
                raise
            count, size = _measure(operation, args, result)
            if count is not None:
                span.set_attribute("agent_sessions.item_count", count)
            if size is not None:
                span.set_attribute("agent_sessions.bytes", size)
            return result

    setattr(traced, _WRAPPED, hook)
    return traced


def _wrap_class(cls: type) -> None:
    for name, operation in _HOOKS.items():
        hook = cls.__dict__.get(name)
        if hook is None or getattr(hook, _WRAPPED, None) is not None:
            continue
        if callable(hook):
            setattr(cls, name, _traced(operation, hook))


def _all_subclasses(cls: type) -> list[type]:
    out: list[type] = []
    todo = [cls]
    while todo:
        subclasses: list[type] = todo.pop().__subclasses__()
        for sub in subclasses:
            out.append(sub)
            todo.append(sub)
    return out


def _unwrap_class(cls: type) -> None:
    for name in _HOOKS:
        hook = cls.__dict__.get(name)
        original = getattr(hook, _WRAPPED, None)
        if original is not None:
            setattr(cls, name, original)


def instrument(tracer_provider: Any = None) -> None:
    """Start tracing every storage operation; idempotent.

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider``; default the global one
            (``opentelemetry.trace.set_tracer_provider``).

    Raises:
        MissingDependencyError: ``opentelemetry-api`` is not installed (the ``otel`` extra).
    """
    global _tracer, _subclass_hook
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise missing("agent_sessions.telemetry", "otel", exc) from exc
    from . import __version__

    _tracer = trace.get_tracer("agent_sessions", __version__, tracer_provider=tracer_provider)
    for cls in _all_subclasses(BaseSession):
        _wrap_class(cls)
    if not _subclass_hook:  # backends defined later (imported lazily) are wrapped as they come
        _subclass_hook = True
        own = BaseSession.__dict__.get("__init_subclass__")  # BaseSession's own, if it has one

        def hook(cls: type[BaseSession], /, **kwargs: Any) -> None:
            if own is not None:
                own.__func__(cls, **kwargs)
            else:
                super(BaseSession, cls).__init_subclass__(**kwargs)
            if _tracer is not None:
                _wrap_class(cls)

        BaseSession.__init_subclass__ = classmethod(hook)  # type: ignore[assignment,method-assign]


def uninstrument() -> None:
    """Stop tracing and restore the original hooks."""
    global _tracer
    _tracer = None
    for cls in _all_subclasses(BaseSession):
        _unwrap_class(cls)


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return _tracer is not None


__all__ = ["instrument", "is_instrumented", "uninstrument"]
