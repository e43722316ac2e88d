"""The in-process recall index (entries by column, BM25 postings) and its snapshots, kept in
a side store in chunks, so a cold process loads postings instead of re-reading and
re-tokenizing the whole recall log.

A snapshot is a run of ``chunk`` items (each well under 1 MB: MongoDB caps a document at
16 MB) followed by one ``snapshot`` marker, written last: a snapshot without its marker, or
whose chunks are not all there, is ignored (a torn write, or chunks a newer snapshot's
writer deleted). The marker names the recall-log record the snapshot covers up to. Postings
are stored per term as base64 of little-endian 32-bit ``doc, freq`` pairs, decoded the first
time a search touches the term.
"""

from __future__ import annotations

import base64
import sys
import uuid
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agents.memory import Session

from ..core.capabilities import Capability, supports
from ..core.textsearch import TOKENS_VERSION
from .search import BM25Index

CHUNK_BYTES = 256 * 1024
"""About how much JSON one chunk holds (a single longer text gets a chunk of its own)."""
CHUNKS_PER_WRITE = 12
"""Chunks appended per batch (~3 MB: under MariaDB's default 16 MB packet)."""
_INT = "I" if array("I").itemsize == 4 else "L"
_COLUMNS = ("session", "seq", "role", "at", "text")


def _encode(flat: list[int]) -> str:
    numbers = array(_INT, flat)
    if sys.byteorder == "big":
        numbers.byteswap()
    return base64.b64encode(numbers.tobytes()).decode("ascii")


def _decode(text: str) -> dict[int, int]:
    numbers = array(_INT, base64.b64decode(text))
    if sys.byteorder == "big":
        numbers.byteswap()
    return dict(zip(numbers[::2], numbers[1::2], strict=True))


class _LazyPostings(dict[str, Any]):
    """Postings as loaded: encoded text per term, turned into the index's ``{doc: freq}`` the
    first time a term is looked up (a query touches few terms)."""

    def get(self, term: str, default: Any = None) -> Any:  # type: ignore[override]
        value = super().get(term, default)
        if isinstance(value, str):
            value = _decode(value)
            self[term] = value
        return value


class SnapshotIndex(BM25Index):
    """A BM25 index that can be written as plain data and read back without tokenizing."""

    def postings_state(self) -> Iterator[tuple[str, str]]:
        """Each term with its postings, encoded."""
        for term, counts in self._postings.items():
            if isinstance(counts, str):
                yield term, counts
            else:
                yield term, _encode([n for pair in counts.items() for n in pair])

    def restore(self, postings: dict[str, str], lengths: dict[int, int]) -> None:
        """Replace the contents by saved postings and document lengths."""
        self._postings = _LazyPostings(postings)
        self._lengths = lengths
        self._total = sum(lengths.values())

    def length(self, doc: int) -> int | None:
        """The token count of document ``doc`` (None when it is not indexed)."""
        return self._lengths.get(doc)


@dataclass
class Entries:
    """One row per indexed item, by column, in log order (a forgotten row keeps its place
    with empty ``role`` and ``text``)."""

    session: list[str] = field(default_factory=list)
    seq: list[int | None] = field(default_factory=list)
    role: list[str] = field(default_factory=list)
    at: list[float] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.session)

    def append(self, record: dict[str, Any]) -> None:
        """Add a ``recall`` record as the next row."""
        for name in _COLUMNS:
            getattr(self, name).append(record[name])

    def row(self, doc: int) -> dict[str, Any]:
        """Row ``doc`` as a ``recall`` record."""
        return {"kind": "recall", **{name: getattr(self, name)[doc] for name in _COLUMNS}}

    def blank(self, doc: int) -> None:
        """Forget row ``doc``'s role and text."""
        self.role[doc] = self.text[doc] = ""


def _chunks(index: SnapshotIndex, entries: Entries) -> Iterator[dict[str, Any]]:
    begin, size = 0, 0
    for doc in range(len(entries)):
        size += len(entries.text[doc]) + len(entries.session[doc]) + 48
        if size >= CHUNK_BYTES or doc == len(entries) - 1:
            part = {name: getattr(entries, name)[begin : doc + 1] for name in _COLUMNS}
            part["length"] = [index.length(d) for d in range(begin, doc + 1)]
            yield {"entries": part}
            begin, size = doc + 1, 0
    # [[term, postings], ...]: terms are never field names (MongoDB reserves some)
    postings: list[list[str]] = []
    size = 0
    for term, encoded in index.postings_state():
        postings.append([term, encoded])
        size += len(term) + len(encoded) + 8
        if size >= CHUNK_BYTES:
            yield {"postings": postings}
            postings, size = [], 0
    if postings:
        yield {"postings": postings}


async def write_snapshot(
    store: Session,
    index: SnapshotIndex,
    entries: Entries,
    upto: int,
    last: Any,
    at: float,
) -> None:
    """Write a snapshot of ``index`` and ``entries`` as they are when called, covering the
    recall log up to record number ``upto`` (whose identity is ``last``), then delete older
    snapshots where the store can delete a range."""
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

    # Every chunk made before the first write: a search in another task may apply new
    # records to the index while this one awaits a write, and a snapshot mixing both was
    # saved truncated (test_a_snapshot_saved_while_a_search_applies_new_records_is_whole).
    for body in list(_chunks(index, entries)):
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
        "tokens": TOKENS_VERSION,
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
    rows = await store.get_sequenced_items(after=marker["first"] - 1, before=seq)
    chunks = {
        item["i"]: item
        for _, item in rows
        if isinstance(item, dict) and item.get("kind") == "chunk" and item.get("id") == marker["id"]
    }
    if sorted(chunks) != list(range(count)):
        return None
    return [chunks[i] for i in range(count)]


def _is_marker(item: Any) -> bool:
    # A snapshot of postings made under another tokenization policy is no snapshot: its terms
    # are not the ones a query looks up (the log is read instead, and a new one written).
    return (
        isinstance(item, dict)
        and item.get("kind") == "snapshot"
        and item.get("tokens", 1) == TOKENS_VERSION
    )


async def read_snapshot(store: Session) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The newest complete snapshot in ``store`` as ``(marker, chunks)``, or None."""
    sequenced: Any = store
    newest = await sequenced.get_sequenced_items(1)
    candidates = [(seq, item) for seq, item in newest if _is_marker(item)]
    for seq, marker in candidates:
        chunks = await _complete(sequenced, marker, seq)
        if chunks is not None:
            return marker, chunks
    if not newest:
        return None
    # The newest item is no complete snapshot (a torn write, or a race with another writer's
    # cleanup): try every marker, newest first (rare, and the store holds few snapshots).
    everything = await sequenced.get_sequenced_items()
    for seq, marker in reversed(everything):
        if _is_marker(marker) and (seq, marker) not in candidates:
            chunks = await _complete(sequenced, marker, seq)
            if chunks is not None:
                return marker, chunks
    return None


def load_chunks(chunks: list[dict[str, Any]]) -> tuple[Entries, dict[str, str], dict[int, int]]:
    """``(entries, postings, lengths)`` from a snapshot's chunks."""
    entries = Entries()
    postings: dict[str, str] = {}
    lengths: list[int | None] = []
    for chunk in chunks:
        part = chunk.get("entries")
        if part is not None:
            for name in _COLUMNS:
                getattr(entries, name).extend(part[name])
            lengths.extend(part["length"])
        postings.update(chunk.get("postings", ()))
    live = {doc: n for doc, n in enumerate(lengths) if n is not None}
    return entries, postings, live
