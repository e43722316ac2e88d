"""The in-process store: every session's items in a dict, shared by sessions and catalog."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .catalog import MemoryCatalog
    from .session import InMemorySession


@dataclass
class Entries:
    """One session's items (JSON text) with their sequence numbers and times."""

    seqs: list[int] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    next_seq: int = 1
    created: float = 0.0
    updated: float = 0.0


class InMemoryStore:
    """Holds sessions for :class:`InMemorySession`; thread-safe. Items are kept as JSON text,
    so callers never share mutable objects with the store."""

    def __init__(self) -> None:
        self.sessions: dict[str, Entries] = {}
        """Each session's items by id; read and written only under ``lock``."""
        self.lock = threading.Lock()

    def entries(self, session_id: str) -> Entries:
        """Return the entries of ``session_id``, made empty if new (call under ``lock``)."""
        entries = self.sessions.get(session_id)
        if entries is None:
            entries = self.sessions[session_id] = Entries()
        return entries

    def session(self, session_id: str, **options: Any) -> InMemorySession:
        """A session of this store (``options`` as for :class:`InMemorySession`)."""
        from .session import InMemorySession

        return InMemorySession(session_id, store=self, **options)

    def catalog(self) -> MemoryCatalog:
        """Return the catalog of this store (see ``agent_sessions.ops.catalog``)."""
        from .catalog import MemoryCatalog

        return MemoryCatalog(self)

    async def close(self) -> None:
        """Nothing to release: the sessions live as long as this object."""

    def session_ids(self) -> list[str]:
        """Return the ids of sessions that hold items."""
        with self.lock:
            return [sid for sid, e in self.sessions.items() if e.seqs]


DEFAULT_STORE = InMemoryStore()
"""The process-wide store used when no ``store`` is given: same id, same conversation."""


def open_store(url: str) -> InMemoryStore:
    """``open_store``'s opener for ``memory://``: the process-wide store, as ``open_session``
    uses."""
    return DEFAULT_STORE
