"""Recall: every item written through :class:`RecallSession` is indexed in the scope's recall
side store and found again by BM25, also after a compaction folded it out of the session."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agents.memory import Session, is_openai_responses_compaction_aware_session

from ..core.capabilities import Capability, supports
from ..wrappers.base import SessionWrapper
from ..wrappers.compaction import CompactionSession
from ._log import RecordLog
from .search import BM25Index

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

SNIPPET = 300


@dataclass(frozen=True)
class RecallHit:
    """One indexed item: its session, sequence number there (None when the session has no
    numbers), role, time (epoch seconds), text and BM25 score."""

    session_id: str
    seq: int | None
    role: str
    at: float
    text: str
    score: float

    def snippet(self, width: int = SNIPPET) -> str:
        """The text, cut to ``width`` characters."""
        return self.text if len(self.text) <= width else self.text[: width - 1] + "…"


def item_text(item: Any) -> tuple[str, str]:
    """The ``(role, text)`` of an SDK item worth searching ("" text for none)."""
    if not isinstance(item, dict):
        return "unknown", ""
    kind = item.get("type", "message")
    if "role" in item:
        content = item.get("content")
        if isinstance(content, str):
            return str(item["role"]), content
        parts = [p.get("text") for p in content or [] if isinstance(p, dict)]
        return str(item["role"]), "\n".join(p for p in parts if isinstance(p, str))
    if kind == "function_call":
        return "tool", f"{item.get('name', '')}({item.get('arguments', '')})"
    if kind == "function_call_output":
        output = item.get("output")
        return "tool", output if isinstance(output, str) else json.dumps(output)
    return str(kind), ""


def epoch(value: datetime | str | None, name: str) -> float | None:
    """``value`` (a datetime or ISO 8601 text; naive means UTC) as epoch seconds."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"{name} {value!r} is not an ISO 8601 date: use e.g. '2026-12-04' or "
                "'2026-12-04T10:00:00+00:00'"
            ) from None
    if value.tzinfo is None:
        from datetime import UTC

        value = value.replace(tzinfo=UTC)
    return value.timestamp()


class RecallIndex:
    """The recall side store of one scope and a BM25 index over it, updated incrementally.

    ``entries`` holds one record per indexed item in log order; an entry of a forgotten
    session stays in its place with empty ``role`` and ``text`` (so positions never move).
    ``compactions`` holds, per compaction noticed by a recall layer, how many entries
    preceded it."""

    def __init__(self, store: Session, clock: Callable[[], float] = time.time) -> None:
        self._log = RecordLog(store)
        self._clock = clock
        self._reset()

    def _reset(self) -> None:
        self._index = BM25Index()
        self.entries: list[dict[str, Any]] = []
        self.compactions: list[int] = []
        self._seen: set[tuple[str, int]] = set()
        self._docs: dict[str, list[int]] = {}
        self.backfilled: set[str] = set()

    async def refresh(self) -> None:
        """Read entries written since the last refresh (by any writer)."""
        reloaded, records = await self._log.refresh()
        if reloaded:
            self._reset()
        for record in records:
            kind = record.get("kind")
            if kind == "backfilled":
                self.backfilled.add(record["session"])
            elif kind == "compacted":
                self.compactions.append(len(self.entries))
            elif kind == "forget":
                for doc in self._docs.pop(record["session"], []):
                    entry = self.entries[doc]
                    self._index.remove(doc, entry["text"])
                    self._seen.discard((entry["session"], entry["seq"]))  # numbers may be reused
                    self.entries[doc] = {**entry, "role": "", "text": ""}
            elif kind == "recall":
                key = (record["session"], record["seq"])
                if record["seq"] is not None:
                    if key in self._seen:
                        continue  # indexed twice by racing writers
                    self._seen.add(key)
                doc = len(self.entries)
                self._index.add(doc, record["text"])
                self._docs.setdefault(record["session"], []).append(doc)
                self.entries.append(record)

    async def forget(self, session_id: str) -> None:
        """Remove every entry of conversation ``session_id`` indexed so far (those of other
        conversations stay). Readers drop them at their next refresh; the stored text is
        blanked in place where the store can rewrite (all of this package's stores)."""
        mark = uuid.uuid4().hex
        await self._log.append({"kind": "forget", "session": session_id, "id": mark})
        before_mark = True

        def blank(record: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal before_mark
            before_mark = before_mark and record.get("id") != mark
            mine = record.get("kind") == "recall" and record["session"] == session_id
            mine = mine and bool(record["text"])  # not blanked already
            return {**record, "role": "", "text": ""} if before_mark and mine else None

        await self._log.rewrite(blank)
        await self.refresh()

    async def index(
        self,
        session_id: str,
        pairs: Sequence[tuple[int | None, Any]],
        *,
        backfill: bool = False,
        compacted: bool = False,
    ) -> None:
        """Index ``(seq, item)`` pairs of ``session_id`` in one write (with ``backfill``,
        mark the session's earlier history as indexed; with ``compacted``, note that the
        session was compacted; both in the same write)."""
        now = self._clock()
        records: list[dict[str, Any]] = []
        for seq, item in pairs:
            role, text = item_text(item)
            if text:
                records.append(
                    {
                        "kind": "recall",
                        "session": session_id,
                        "seq": seq,
                        "role": role,
                        "at": now,
                        "text": text,
                    }
                )
        if backfill:
            records.append({"kind": "backfilled", "session": session_id, "at": now})
        if compacted:
            records.append({"kind": "compacted", "session": session_id, "at": now})
        if records:
            await self._log.append(*records)

    async def search(
        self,
        query: str,
        *,
        roles: Sequence[str] | None = None,
        limit: int = 5,
        start: float | None = None,
        end: float | None = None,
    ) -> list[RecallHit]:
        """The ``limit`` best entries for ``query`` by BM25, after the role and time filters."""
        await self.refresh()
        wanted = set(roles) if roles else None

        def keep(doc: int) -> bool:
            entry = self.entries[doc]
            return (
                (wanted is None or entry["role"] in wanted)
                and (start is None or entry["at"] >= start)
                and (end is None or entry["at"] <= end)
            )

        return [
            RecallHit(e["session"], e["seq"], e["role"], e["at"], e["text"], score)
            for doc, score in self._index.search(query, where=keep, top_k=limit)
            for e in [self.entries[doc]]
        ]


def _numbered(session: Session) -> Session | None:
    """The session whose sequence numbers the items written to ``session`` get: itself when
    it declares them, a CompactionSession's inner session (which keeps every original item
    and its number), else None."""
    if supports(session, Capability.SEQUENCED):
        return session
    if isinstance(session, CompactionSession):
        return session.inner
    return None


class RecallSession(SessionWrapper):
    """A layer that indexes every item written through it into a memory scope's recall index.

    Put it outermost (e.g. over a ``CompactionSession``) so items are indexed as written and
    stay searchable after compaction folds them away. Each entry carries the item's sequence
    number in the store (over a CompactionSession: its number in the inner session, which
    keeps the originals). The history the inner session held before is indexed on first
    write; ``clear_session`` also forgets the session's entries.
    """

    run_compaction: Callable[..., Awaitable[None]]
    """Present when the inner session has the SDK's compaction hook (e.g. a
    CompactionSession): the Runner calls it on the outermost session after each turn."""

    def __init__(self, inner: Session, recall: RecallIndex) -> None:
        super().__init__(inner)
        self.recall = recall
        self._numbered = _numbered(inner)
        self._cursor: int | None = None
        """Over a CompactionSession: the highest number this object saw indexed."""
        self._compactions = inner.compactions if isinstance(inner, CompactionSession) else 0
        if is_openai_responses_compaction_aware_session(inner):
            self.run_compaction = self._run_compaction

    async def _run_compaction(self, args: Any = None) -> None:
        await self.inner.run_compaction(args)  # type: ignore[attr-defined]
        if self._compacted():
            await self.recall.index(self.session_id, [], compacted=True)

    def _compacted(self) -> bool:
        """Whether the inner CompactionSession compacted since the last call."""
        if not isinstance(self.inner, CompactionSession):
            return False
        seen, self._compactions = self._compactions, self.inner.compactions
        return self._compactions != seen

    async def _backfill(self) -> None:
        if self.session_id in self.recall.backfilled:
            return
        await self.recall.refresh()
        if self.session_id in self.recall.backfilled:
            return
        numbered: Any = self._numbered
        if numbered is not None:
            pairs: list[tuple[int | None, Any]] = list(await numbered.get_sequenced_items())
            self._cursor = max((seq for seq, _ in pairs if seq is not None), default=0)
        else:
            pairs = [(None, item) for item in await self.inner.get_items()]
        await self.recall.index(self.session_id, pairs, backfill=True)
        self.recall.backfilled.add(self.session_id)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the inner session, then index them."""
        self._check_open()
        await self._backfill()
        numbered: Any = self._numbered
        pairs: list[tuple[int | None, Any]]
        if supports(self.inner, Capability.SEQUENCED):
            seqs = await numbered.add_sequenced_items(items)
            pairs = list(zip(seqs, items, strict=True))
        elif numbered is not None:
            if self._cursor is None:  # backfilled by another object: start at the newest
                newest = await numbered.get_sequenced_items(1)
                self._cursor = newest[-1][0] if newest else 0
            await self.inner.add_items(items)
            # Everything after the cursor: these items and any a concurrent writer added
            # (indexing an item twice is harmless: readers keep one per number).
            pairs = list(await numbered.get_sequenced_items(after=self._cursor))
            if pairs:
                self._cursor = pairs[-1][0]
        else:
            await self.inner.add_items(items)
            pairs = [(None, item) for item in items]
        await self.recall.index(self.session_id, pairs, compacted=self._compacted())

    async def clear_session(self) -> None:
        """Clear the inner session and forget its recall entries."""
        self._check_open()
        await self.inner.clear_session()
        self._cursor = None
        await self.recall.forget(self.session_id)
