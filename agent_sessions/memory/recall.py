"""Recall: every item written through :class:`RecallSession` is indexed in the scope's recall
side store and found again by BM25, also after a compaction folded it out of the session."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agents.memory import Session, is_openai_responses_compaction_aware_session

from ..core.capabilities import Capability, supports
from ..wrappers.base import SessionWrapper
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
    """The recall side store of one scope and a BM25 index over it, updated incrementally."""

    def __init__(self, store: Session, clock: Callable[[], float] = time.time) -> None:
        self._log = RecordLog(store)
        self._clock = clock
        self._index = BM25Index()
        self.entries: list[dict[str, Any]] = []
        self._seen: set[tuple[str, int]] = set()
        self.backfilled: set[str] = set()

    async def refresh(self) -> None:
        """Read entries written since the last refresh (by any writer)."""
        reloaded, records = await self._log.refresh()
        if reloaded:
            self._index, self.entries, self._seen, self.backfilled = BM25Index(), [], set(), set()
        for record in records:
            if record.get("kind") == "backfilled":
                self.backfilled.add(record["session"])
                continue
            if record.get("kind") != "recall":
                continue
            key = (record["session"], record["seq"])
            if record["seq"] is not None:
                if key in self._seen:
                    continue  # indexed twice by racing backfills
                self._seen.add(key)
            self._index.add(len(self.entries), record["text"])
            self.entries.append(record)

    async def index(
        self, session_id: str, pairs: Sequence[tuple[int | None, Any]], *, backfill: bool = False
    ) -> None:
        """Index ``(seq, item)`` pairs of ``session_id`` in one write (with ``backfill``,
        mark the session's earlier history as indexed in the same write)."""
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


class RecallSession(SessionWrapper):
    """A layer that indexes every item written through it into a memory scope's recall index.

    Put it outermost (e.g. over a ``CompactionSession``) so items are indexed as written and
    stay searchable after compaction folds them away. The history the inner session held
    before is indexed on first write.
    """

    run_compaction: Callable[..., Awaitable[None]]
    """The inner session's, when it has the SDK's compaction hook (e.g. a CompactionSession):
    the Runner calls it on the outermost session after each turn."""

    def __init__(self, inner: Session, recall: RecallIndex) -> None:
        super().__init__(inner)
        self.recall = recall
        if is_openai_responses_compaction_aware_session(inner):
            self.run_compaction = inner.run_compaction

    async def _backfill(self) -> None:
        if self.session_id in self.recall.backfilled:
            return
        await self.recall.refresh()
        if self.session_id in self.recall.backfilled:
            return
        if supports(self.inner, Capability.SEQUENCED):
            pairs: list[tuple[int | None, Any]] = list(
                await self.inner.get_sequenced_items()  # type: ignore[attr-defined]
            )
        else:
            pairs = [(None, item) for item in await self.inner.get_items()]
        await self.recall.index(self.session_id, pairs, backfill=True)
        self.recall.backfilled.add(self.session_id)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the inner session, then index them."""
        self._check_open()
        await self._backfill()
        if supports(self.inner, Capability.SEQUENCED):
            seqs: list[int | None] = list(
                await self.inner.add_sequenced_items(items)  # type: ignore[attr-defined]
            )
        else:
            await self.inner.add_items(items)
            seqs = [None] * len(items)
        await self.recall.index(self.session_id, list(zip(seqs, items, strict=True)))
