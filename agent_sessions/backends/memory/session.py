"""In-process backend: a dict of sessions in one Python process, nothing persisted.

An :class:`InMemoryStore` holds every session's items (JSON text) and its catalog; an
:class:`InMemorySession` is a handle on one store (the process-wide :data:`DEFAULT_STORE` by
default)."""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.base import STORE_CAPABILITIES, BaseSession, Row, StoreOptions
from ...core.bm25 import BM25Index
from ...core.capabilities import Capability
from ...core.catalog import CatalogQuery, SessionInfo, group_families, utc
from ...core.codec import decode_item
from ...core.textsearch import Between, Equal, item_text, passes
from ...errors import CommitConflictError, SequenceConflictError

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ...core.catalog import CatalogStore


class TextIndex:
    """A session's full-text index (BM25 over the items' top-level ``"text"``), kept in the
    store beside its items and changed with them under the store's lock."""

    def __init__(self, seqs: list[int], payloads: list[str]) -> None:
        self.bm25 = BM25Index()
        self.texts: dict[int, str] = {}
        for seq, payload in zip(seqs, payloads, strict=True):
            self.add(seq, payload)

    def add(self, seq: int, payload: str) -> None:
        try:
            text = item_text(decode_item(payload))
        except ValueError:
            return  # an item that no longer decodes is skipped, as a read skips it
        if text is not None:
            self.texts[seq] = text
            self.bm25.add(seq, text)

    def discard(self, seq: int) -> None:
        text = self.texts.pop(seq, None)
        if text is not None:
            self.bm25.remove(seq, text)


@dataclass
class Entries:
    """One session's items (JSON text) with their sequence numbers and times, and its text
    index once a search built it (then every write keeps it current)."""

    seqs: list[int] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    next_seq: int = 1
    created: float = 0.0
    updated: float = 0.0
    index: TextIndex | None = None


class InMemoryStore:
    """Holds sessions for :class:`InMemorySession`; thread-safe. Items are kept as JSON text,
    so callers never share mutable objects with the store."""

    def __init__(self) -> None:
        self.sessions: dict[str, Entries] = {}
        """Each session's items by id; read and written only under ``lock``."""
        self.lock = threading.Lock()

    def entries(self, session_id: str) -> Entries:
        """Return the entries of ``session_id``, made empty if new (call under ``lock``)."""
        return self.sessions.setdefault(session_id, Entries())

    def session(self, session_id: str, **options: Any) -> InMemorySession:
        """A session of this store (``options`` as for :class:`InMemorySession`)."""
        return InMemorySession(session_id, store=self, **options)

    def catalog(self) -> MemoryCatalog:
        """Return the catalog of this store (see ``agent_sessions.ops.catalog``)."""
        return MemoryCatalog(self)

    async def close(self) -> None:
        """Nothing to release: the sessions live as long as this object."""

    def session_ids(self) -> list[str]:
        """The ids of sessions that hold items."""
        with self.lock:
            return [sid for sid, e in self.sessions.items() if e.seqs]


_EMPTY = Entries()  # what an unknown session reads as; never written to

DEFAULT_STORE = InMemoryStore()
"""The process-wide store used when no ``store`` is given: same id, same conversation."""


def open_store(url: str) -> InMemoryStore:
    """``open_store``'s opener for ``memory://``: the process-wide store, as ``open_session``
    uses."""
    return DEFAULT_STORE


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
        return (await self.families([session_id]))[session_id]

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        with self.store.lock:
            return group_families(list(self.store.sessions), session_ids)

    async def delete(self, session_ids: Sequence[str]) -> int:
        with self.store.lock:
            return sum(self.store.sessions.pop(sid, None) is not None for sid in session_ids)


def _window(entries: Entries, after: int | None, before: int | None) -> tuple[int, int]:
    lo = 0 if after is None else bisect_right(entries.seqs, after)
    hi = len(entries.seqs) if before is None else bisect_left(entries.seqs, before)
    return lo, max(lo, hi)


class InMemorySession(BaseSession):
    """A session kept in this process's memory (tests, prototypes, ephemeral agents).

    Args:
        session_id: the conversation's id.
        store: where sessions live; default the process-wide :data:`DEFAULT_STORE`.
        session_settings, max_item_bytes, strict: see :class:`BaseSession`.
    """

    capabilities = STORE_CAPABILITIES | {Capability.TEXT_SEARCH}
    _single_dispatch_writes = True

    def __init__(
        self,
        session_id: str,
        *,
        store: InMemoryStore | None = None,
        **options: Unpack[StoreOptions],
    ) -> None:
        super().__init__(session_id, **options)
        self.store = store if store is not None else DEFAULT_STORE

    def _member_options(self) -> dict[str, Any]:
        return {"store": self.store}

    async def _append(self, payloads: list[str]) -> list[int]:
        with self.store.lock:
            return self._append_locked(payloads)

    async def _commit(
        self,
        ops: list[tuple[str, BaseSession, list[str]]],
        expect: list[tuple[BaseSession, int | None]],
    ) -> list[Any] | None:
        near = [s for _, s, _ in ops] + [g for g, _ in expect]
        if not all(isinstance(s, InMemorySession) and s.store is self.store for s in near):
            return None
        with self.store.lock:
            for guard, seq in expect:
                seqs = self.store.sessions.get(guard.session_id, _EMPTY).seqs
                if (seqs[-1] if seqs else None) != seq:
                    raise CommitConflictError(f"session {guard.session_id!r} moved past {seq}")
            return [
                s._append_locked(payloads) if kind == "append" else s._pop_locked()  # type: ignore[attr-defined]
                for kind, s, payloads in ops
            ]

    def _append_locked(self, payloads: list[str]) -> list[int]:
        entries = self.store.entries(self.session_id)
        entries.updated = time.time()
        entries.created = entries.created or entries.updated
        first = entries.next_seq
        seqs = list(range(first, first + len(payloads)))
        entries.next_seq = first + len(payloads)
        entries.seqs.extend(seqs)
        entries.payloads.extend(payloads)
        if entries.index is not None:
            for seq, payload in zip(seqs, payloads, strict=True):
                entries.index.add(seq, payload)
        return seqs

    async def _write_at(self, rows: list[Row], created: float, updated: float) -> None:
        with self.store.lock:
            entries = self.store.entries(self.session_id)
            if entries.seqs:
                raise SequenceConflictError(
                    f"session {self.session_id!r} already holds {len(entries.seqs)} item(s); "
                    "write_sequenced_items fills an empty session only. Nothing was written"
                )
            entries.seqs[:] = [seq for seq, _ in rows]
            entries.payloads[:] = [payload for _, payload in rows]
            entries.next_seq = max(entries.next_seq, rows[-1][0] + 1)
            entries.created, entries.updated = created, updated
            entries.index = None  # built from the items at the next search

    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        with self.store.lock:
            entries = self.store.sessions.get(self.session_id, _EMPTY)
            lo, hi = _window(entries, after, before)
            if limit is not None:
                lo = max(lo, hi - limit)
            return list(zip(entries.seqs[lo:hi], entries.payloads[lo:hi], strict=True))

    async def _pop(self) -> str | None:
        with self.store.lock:
            return self._pop_locked()

    async def _pop_row_checked(self, check: Callable[[str], Any]) -> Any:
        with self.store.lock:
            entries = self.store.sessions.get(self.session_id, _EMPTY)
            if not entries.seqs:
                return None
            result = check(entries.payloads[-1])  # raises: nothing removed
            self._pop_locked()
            return result

    def _pop_locked(self) -> str | None:
        entries = self.store.sessions.get(self.session_id, _EMPTY)
        if not entries.seqs:
            return None
        seq = entries.seqs.pop()
        if entries.index is not None:
            entries.index.discard(seq)
        return entries.payloads.pop()

    async def _clear(self) -> None:
        with self.store.lock:
            entries = self.store.sessions.get(self.session_id, _EMPTY)
            entries.seqs.clear()
            entries.payloads.clear()
            entries.index = None

    async def _rewrite(self, rows: list[Row]) -> int:
        with self.store.lock:
            entries = self.store.sessions.get(self.session_id, _EMPTY)
            replaced = 0
            for seq, payload in rows:
                i = bisect_left(entries.seqs, seq)
                if i < len(entries.seqs) and entries.seqs[i] == seq:
                    entries.payloads[i] = payload
                    replaced += 1
                    if entries.index is not None:
                        entries.index.discard(seq)
                        entries.index.add(seq, payload)
            return replaced

    async def _delete_before(self, before: int) -> int:
        with self.store.lock:
            entries = self.store.sessions.get(self.session_id, _EMPTY)
            cut = bisect_left(entries.seqs, before)
            if entries.index is not None:
                for seq in entries.seqs[:cut]:
                    entries.index.discard(seq)
            del entries.seqs[:cut]
            del entries.payloads[:cut]
            return cut

    async def _replace_rows(
        self, expected: list[Row] | None, payloads: list[str], prune: Callable[[str], bool] | None
    ) -> bool:
        """The SDK compaction hook's atomic swap (see ``core.sdk_compaction``), under the
        store's lock."""
        with self.store.lock:
            entries = self.store.entries(self.session_id)
            if expected is None:
                cut = 0
            else:
                cut = len(entries.seqs) - len(expected)
                current = list(zip(entries.seqs[cut:], entries.payloads[cut:], strict=True))
                if cut < 0 or [(seq, text) for seq, text in expected] != current:
                    return False
            keep = 0
            if prune is not None:
                while keep < cut and prune(entries.payloads[keep]):
                    keep += 1
            first = entries.next_seq
            entries.seqs[cut:] = range(first, first + len(payloads))
            entries.payloads[cut:] = payloads
            del entries.seqs[:keep]
            del entries.payloads[:keep]
            entries.next_seq = first + len(payloads)
            entries.index = None  # built from the items at the next search
            if payloads:
                entries.updated = time.time()
                entries.created = entries.created or entries.updated
            return True

    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        with self.store.lock:
            entries = self.store.sessions.get(self.session_id, _EMPTY)
            lo, hi = _window(entries, after, before)
            return hi - lo

    async def _search_text(
        self, words: list[str], limit: int, equal: Equal, between: Between
    ) -> list[tuple[int, str, float]]:
        with self.store.lock:
            entries = self.store.sessions.get(self.session_id)
            if entries is None or not entries.seqs:
                return []
            if entries.index is None:
                entries.index = TextIndex(entries.seqs, entries.payloads)
            where: Callable[[int], bool] | None = None
            if equal or between:
                seqs, payloads = entries.seqs, entries.payloads

                def check(seq: int) -> bool:
                    try:
                        item = decode_item(payloads[bisect_left(seqs, seq)])
                    except ValueError:
                        item = None
                    return passes(item, equal, between)

                where = check

            ranked = entries.index.bm25.search(" ".join(words), where=where, top_k=limit)
            return [
                (seq, entries.payloads[bisect_left(entries.seqs, seq)], score)
                for seq, score in ranked
            ]

    def catalog_store(self) -> CatalogStore:
        """Return the catalog of this session's store (see ``agent_sessions.ops.catalog``)."""
        return self.store.catalog()


def open_url(url: str, session_id: str, **options: Any) -> InMemorySession:
    """``open_session``'s opener for ``memory://``: a session of the process-wide store."""
    return InMemorySession(session_id, **options)


__all__ = ["DEFAULT_STORE", "InMemorySession", "InMemoryStore", "open_store", "open_url"]
