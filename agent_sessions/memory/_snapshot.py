"""Snapshots of the in-process recall index, kept in a side store in chunks, so a cold process
loads postings instead of re-reading and re-tokenizing the whole recall log.

A snapshot is a run of ``chunk`` items (each well under 1 MB: MongoDB caps a document at
16 MB) followed by one ``snapshot`` marker, written last: a snapshot without its marker, or
whose chunks are not all there, is ignored (a torn write, or chunks a newer snapshot's
writer deleted). The marker names the recall-log record the snapshot covers up to.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from agents.memory import Session

from ..core.capabilities import Capability, supports
from .search import BM25Index

CHUNK_BYTES = 256 * 1024
"""About how much JSON one chunk holds (a single longer text gets a chunk of its own)."""
CHUNKS_PER_WRITE = 12
"""Chunks appended per batch (~3 MB: under MariaDB's default 16 MB packet)."""


class _LazyPostings(dict[str, Any]):
    """Postings as loaded: ``[doc, freq, doc, freq, ...]`` lists, turned into the index's
    ``{doc: freq}`` the first time a term is looked up (a query touches few terms)."""

    def get(self, term: str, default: Any = None) -> Any:  # type: ignore[override]
        value = super().get(term, default)
        if isinstance(value, list):
            value = dict(zip(value[::2], value[1::2], strict=True))
            self[term] = value
        return value


class SnapshotIndex(BM25Index):
    """A BM25 index that can be written as plain lists and read back without tokenizing."""

    def postings_state(self) -> Iterator[tuple[str, list[int]]]:
        """Each term with its postings flattened to ``[doc, freq, ...]``."""
        for term, counts in self._postings.items():
            if isinstance(counts, list):
                yield term, counts
            else:
                yield term, [n for pair in counts.items() for n in pair]

    def restore(self, postings: dict[str, list[int]], lengths: dict[int, int]) -> None:
        """Replace the contents by saved postings and document lengths."""
        self._postings = _LazyPostings(postings)
        self._lengths = lengths
        self._total = sum(lengths.values())

    def length(self, doc: int) -> int | None:
        """The token count of document ``doc`` (None when it is not indexed)."""
        return self._lengths.get(doc)


def _chunks(index: SnapshotIndex, entries: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    rows: list[list[Any]] = []
    size = 0
    for doc, e in enumerate(entries):
        rows.append([e["session"], e["seq"], e["role"], e["at"], e["text"], index.length(doc)])
        size += len(e["text"]) + len(e["session"]) + 48
        if size >= CHUNK_BYTES:
            yield {"entries": rows}
            rows, size = [], 0
    if rows:
        yield {"entries": rows}
    # [[term, [doc, freq, ...]], ...]: terms are never field names (MongoDB reserves some)
    postings: list[list[Any]] = []
    size = 0
    for term, flat in index.postings_state():
        postings.append([term, flat])
        size += len(term) + 8 * len(flat) + 8
        if size >= CHUNK_BYTES:
            yield {"postings": postings}
            postings, size = [], 0
    if postings:
        yield {"postings": postings}


async def write_snapshot(
    store: Session,
    index: SnapshotIndex,
    entries: list[dict[str, Any]],
    upto: int,
    last: list[Any],
    at: float,
) -> None:
    """Write a snapshot of ``index`` and ``entries`` covering the recall log up to record
    number ``upto`` (whose identity is ``last``), then delete older snapshots where the store
    can delete a range."""
    sequenced: Any = store
    snap = uuid.uuid4().hex
    first: int | None = None
    count = 0
    batch: list[dict[str, Any]] = []

    async def flush() -> None:
        nonlocal first, batch
        if batch:
            seqs = await sequenced.add_sequenced_items(batch)
            first = seqs[0] if first is None else first
            batch = []

    for body in _chunks(index, entries):
        batch.append({"kind": "chunk", "id": snap, "i": count, **body})
        count += 1
        if len(batch) >= CHUNKS_PER_WRITE:
            await flush()
    await flush()
    marker = {
        "kind": "snapshot",
        "id": snap,
        "chunks": count,
        "first": first,
        "upto": upto,
        "last": last,
        "at": at,
    }
    [seq] = await sequenced.add_sequenced_items([marker])
    if supports(store, Capability.RANGE_DELETE):
        await sequenced.delete_items(before=first if first is not None else seq)


async def _complete(store: Any, marker: dict[str, Any], seq: int) -> list[dict[str, Any]] | None:
    """The chunks of the snapshot ``marker`` (numbered ``seq``) in order, or None when any is
    missing."""
    count = marker["chunks"]
    if not count:
        return []
    first = marker["first"]
    rows = await store.get_sequenced_items(after=first - 1, before=seq)
    chunks = {
        item["i"]: item
        for _, item in rows
        if isinstance(item, dict) and item.get("kind") == "chunk" and item.get("id") == marker["id"]
    }
    if sorted(chunks) != list(range(count)):
        return None
    return [chunks[i] for i in range(count)]


def _is_marker(item: Any) -> bool:
    return isinstance(item, dict) and item.get("kind") == "snapshot"


async def read_snapshot(store: Session) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The newest complete snapshot in ``store`` as ``(marker, chunks)``, or None."""
    sequenced: Any = store
    newest = await sequenced.get_sequenced_items(1)
    candidates = [(seq, item) for seq, item in newest if _is_marker(item)]
    for seq, marker in candidates:
        chunks = await _complete(sequenced, marker, seq)
        if chunks is not None:
            return marker, chunks
    # The newest item is no complete snapshot (a torn write, or a race with another writer's
    # cleanup): try every marker, newest first (rare, and the store holds few snapshots).
    everything = await sequenced.get_sequenced_items()
    for seq, marker in reversed(everything):
        if _is_marker(marker) and (seq, marker) not in candidates:
            chunks = await _complete(sequenced, marker, seq)
            if chunks is not None:
                return marker, chunks
    return None


def load_chunks(
    chunks: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, list[int]], dict[int, int]]:
    """``(entries, postings, lengths)`` from a snapshot's chunks."""
    entries: list[dict[str, Any]] = []
    postings: dict[str, list[int]] = {}
    lengths: dict[int, int] = {}
    for chunk in chunks:
        for session, seq, role, at, text, length in chunk.get("entries", ()):
            if length is not None:
                lengths[len(entries)] = length
            entry = {"session": session, "seq": seq, "role": role, "at": at, "text": text}
            entries.append({"kind": "recall", **entry})
        postings.update(chunk.get("postings", ()))
    return entries, postings, lengths
