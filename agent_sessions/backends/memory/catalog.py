"""The catalog of an :class:`~agent_sessions.backends.memory.InMemoryStore`."""

from __future__ import annotations

from collections.abc import Sequence

from ...core.catalog import CatalogQuery, SessionInfo, family_root, utc
from .store import InMemoryStore


class MemoryCatalog:
    """Lists and deletes the sessions of one in-process store."""

    def __init__(self, store: InMemoryStore) -> None:
        self.store = store

    async def exists(self) -> bool:
        return True

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        with self.store.lock:
            infos = [
                SessionInfo(sid, utc(e.created or None), utc(e.updated or None), len(e.seqs))
                for sid, e in self.store.sessions.items()
            ]
        infos.sort(key=lambda info: info.session_id)
        return [info for info in infos if query.matches(info)][: query.limit]

    async def family_ids(self, session_id: str) -> list[str]:
        with self.store.lock:
            return [sid for sid in self.store.sessions if family_root(sid) == session_id]

    async def delete(self, session_ids: Sequence[str]) -> int:
        with self.store.lock:
            return sum(self.store.sessions.pop(sid, None) is not None for sid in session_ids)
