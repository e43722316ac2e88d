"""agent_sessions: session storage for the OpenAI Agents SDK.

Backends (``InMemorySession``, ``SQLiteSession``, and behind extras ``RedisSession``,
``SQLAlchemySession``, ``MongoDBSession``), wrappers layered over any Session, and long-term
``Memory`` over the same stores (``agent_sessions.memory``). Names of
optional parts resolve lazily, so importing this package imports no optional driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import errors

__version__ = "0.1.0"

_MODULES: dict[str, tuple[str | None, str]] = {
    # module: (the pip extra its names need, None for the core; its names). Every name resolves
    # on first use, so `import agent_sessions` (and the CLI's --help) does not import the SDK.
    "core.base": (None, "BaseSession"),
    "backends.memory": (None, "InMemorySession InMemoryStore"),
    "backends.sqlite": (None, "SQLiteSession SQLiteStore"),
    "core.capabilities": (
        None,
        "Capability capabilities_of supports SupportsNativeExpiry "
        "SupportsRangeDelete SupportsSequencedItems",
    ),
    "core.registry": (None, "open_session open_store Store register_scheme registered_schemes"),
    "backends.redis": ("redis", "RedisSession"),
    "backends.sql": ("sqlalchemy", "SQLAlchemySession"),
    "backends.mongodb": ("mongodb", "MongoDBSession"),
    "wrappers.encrypted": ("encryption", "EncryptedSession Keyring is_encrypted"),
    "wrappers.ttl": (None, "TTLSession"),
    "wrappers.usage": (None, "UsageTrackingSession"),
    "wrappers.branching": (None, "BranchingSession"),
    "wrappers.advanced": (None, "AdvancedSession AdvancedSQLiteSession"),
    "wrappers.compaction": (None, "CompactionSession"),
    "wrappers.window": (None, "WindowSession MicroCompaction window_input_callback"),
    "wrappers.resilient": (None, "ResilientSession RetryPolicy CircuitBreaker"),
    "wrappers.scoped": (None, "ContextScopedSession"),
    "memory": (None, "Memory Upkeep upkeep_agent HashingEmbedder OpenAIEmbedder WordLlamaEmbedder"),
}
_LAZY = {name: module for module, (_, names) in _MODULES.items() for name in names.split()}

if TYPE_CHECKING:  # pragma: no cover
    # The lazy names, typed for checkers (the `as` form re-exports them explicitly).
    from .backends.memory import InMemorySession as InMemorySession
    from .backends.memory import InMemoryStore as InMemoryStore
    from .backends.mongodb import MongoDBSession as MongoDBSession
    from .backends.redis import RedisSession as RedisSession
    from .backends.sql import SQLAlchemySession as SQLAlchemySession
    from .backends.sqlite import SQLiteSession as SQLiteSession
    from .backends.sqlite import SQLiteStore as SQLiteStore
    from .core.base import BaseSession as BaseSession
    from .core.capabilities import Capability as Capability
    from .core.capabilities import SupportsNativeExpiry as SupportsNativeExpiry
    from .core.capabilities import SupportsRangeDelete as SupportsRangeDelete
    from .core.capabilities import SupportsSequencedItems as SupportsSequencedItems
    from .core.capabilities import capabilities_of as capabilities_of
    from .core.capabilities import supports as supports
    from .core.registry import Store as Store
    from .core.registry import open_session as open_session
    from .core.registry import open_store as open_store
    from .core.registry import register_scheme as register_scheme
    from .core.registry import registered_schemes as registered_schemes
    from .memory import HashingEmbedder as HashingEmbedder
    from .memory import Memory as Memory
    from .memory import OpenAIEmbedder as OpenAIEmbedder
    from .memory import Upkeep as Upkeep
    from .memory import WordLlamaEmbedder as WordLlamaEmbedder
    from .memory import upkeep_agent as upkeep_agent
    from .wrappers.advanced import AdvancedSession as AdvancedSession
    from .wrappers.advanced import AdvancedSQLiteSession as AdvancedSQLiteSession
    from .wrappers.branching import BranchingSession as BranchingSession
    from .wrappers.compaction import CompactionSession as CompactionSession
    from .wrappers.encrypted import EncryptedSession as EncryptedSession
    from .wrappers.encrypted import Keyring as Keyring
    from .wrappers.encrypted import is_encrypted as is_encrypted
    from .wrappers.resilient import CircuitBreaker as CircuitBreaker
    from .wrappers.resilient import ResilientSession as ResilientSession
    from .wrappers.resilient import RetryPolicy as RetryPolicy
    from .wrappers.scoped import ContextScopedSession as ContextScopedSession
    from .wrappers.ttl import TTLSession as TTLSession
    from .wrappers.usage import UsageTrackingSession as UsageTrackingSession
    from .wrappers.window import MicroCompaction as MicroCompaction
    from .wrappers.window import WindowSession as WindowSession
    from .wrappers.window import window_input_callback as window_input_callback

    AsyncSQLiteSession = SQLiteSession


_ALIASES = {"AsyncSQLiteSession": "SQLiteSession"}
"""The SDK's ``AsyncSQLiteSession`` name: ``SQLiteSession`` is already asynchronous (sqlite3 on
its own worker thread, no aiosqlite)."""


def __getattr__(name: str) -> Any:
    if name in _ALIASES:
        value = globals()[name] = __getattr__(_ALIASES[name])
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agent_sessions' has no attribute {name!r}")
    try:
        imported = importlib.import_module(f"agent_sessions.{module}")
    except ImportError as exc:
        from .errors import MissingDependencyError

        extra = _MODULES[module][0]
        if extra is None or isinstance(exc, MissingDependencyError):
            raise
        from .core.extras import missing

        raise missing(name, extra, exc) from exc
    value = globals()[name] = getattr(imported, name)
    return value


__all__ = ["AsyncSQLiteSession", "errors", *_LAZY]
