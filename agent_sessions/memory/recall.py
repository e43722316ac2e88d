"""Recall: every item written through :class:`RecallSession` is indexed in the scope's recall
side store and found again by BM25, also after a compaction folded it out of the session."""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agents.memory import Session, is_openai_responses_compaction_aware_session

from ..core.capabilities import Capability, supports
from ..errors import MemoryEditError
from ..wrappers.base import SessionWrapper
from ..wrappers.compaction import CompactionSession
from ..wrappers.encrypted import EncryptedSession
from ..wrappers.foreign import layers
from ._log import RecordLog
from ._snapshot import Entries, SnapshotIndex, load_chunks, read_snapshot, write_snapshot

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

SNIPPET = 300
INDEXED_CHARS = 100_000
"""How much of an item's text recall indexes (and upkeep reads): one huge tool output must
not outgrow an engine's index (PostgreSQL's ``tsvector`` holds 1 MB) nor every later search."""
log = logging.getLogger(__name__)


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


def _identity(record: Any) -> list[Any] | None:
    """The part of a recall-log record a forget never rewrites (it blanks role and text)."""
    if not isinstance(record, dict):
        return None
    return [record.get("kind"), record.get("session"), record.get("seq"), record.get("at")]


class RecallIndex:
    """The recall log of one scope (a side store) and how it is searched.

    The log holds one ``recall`` record per indexed item, plus ``compacted`` and ``forget``
    markers, in commit order. Its small ``marks`` side store notes which sessions' earlier
    history was indexed and where each forget happened, so neither a write nor a search
    reads the whole log.

    Search runs where the store can: a log that declares ``Capability.TEXT_SEARCH`` ranks
    with the store's own full-text index (``native``). Elsewhere this object keeps a BM25
    index in process, updated incrementally from the log; with ``snapshots`` (a side store)
    it saves the index there in chunks every ``snapshot_every`` new records or a tenth of
    the log, whichever is more, and a cold object loads the newest complete snapshot and
    reads only the records after it. ``entries`` then holds one record per indexed item in
    log order.
    """

    def __init__(
        self,
        store: Session,
        clock: Callable[[], float] = time.time,
        *,
        marks: Session,
        snapshots: Session | None = None,
        native: bool = True,
        snapshot_every: int = 1000,
    ) -> None:
        self.store = store
        self._log = RecordLog(store, key=_identity)
        self._marks = RecordLog(marks)
        sequenced = supports(store, Capability.SEQUENCED)
        self.native = native and sequenced and supports(store, Capability.TEXT_SEARCH)
        """Whether searches run on the store's own full-text index."""
        usable = sequenced and snapshots is not None and supports(snapshots, Capability.SEQUENCED)
        self._snapshots = snapshots if usable and not self.native else None
        self._saved = snapshots  # cleared by a forget, whichever path wrote it
        self.snapshot_every = snapshot_every
        self._clock = clock
        self.backfilled: set[str] = set()
        """Sessions whose earlier history was indexed (as of the last look at the marks)."""
        self._forgotten: dict[str, int] = {}
        self._reset()

    def _reset(self) -> None:
        self._index = SnapshotIndex()
        self._entries = Entries()
        self._seen_keys: set[tuple[str, int]] | None = set()
        self._loaded = False
        self.from_snapshot: int | None = None
        """The log record up to which the snapshot this index loaded reached (None: none)."""
        self._unsaved = 0
        """Log records applied since the snapshot this index was loaded from or saved as."""

    @property
    def entries(self) -> list[dict[str, Any]]:
        """The in-process index's entries as ``recall`` records, in log order (a forgotten
        one keeps its place with empty ``role`` and ``text``)."""
        return [self._entries.row(doc) for doc in range(len(self._entries))]

    def _seen(self) -> set[tuple[str, int]]:
        """``(session, seq)`` of the live entries (built on first use after a snapshot load)."""
        if self._seen_keys is None:
            e = self._entries
            self._seen_keys = {
                (s, q)
                for s, q, t in zip(e.session, e.seq, e.text, strict=True)
                if t and q is not None
            }
        return self._seen_keys

    async def refresh_marks(self) -> None:
        """Read the backfill and forget marks written since the last look (by any writer)."""
        reloaded, records = await self._marks.refresh()
        if reloaded:
            self.backfilled, self._forgotten = set(), {}
        for record in records:
            kind, session = record.get("kind"), str(record.get("session"))
            if kind == "backfilled":
                self.backfilled.add(session)
            elif kind == "forget" and record.get("before") is not None:
                before = self._forgotten.get(session, record["before"])
                self._forgotten[session] = max(before, record["before"])

    async def refresh(self) -> None:
        """Bring the in-process index up to date with the log (entries written since the last
        refresh, by any writer); a cold object first loads the newest complete snapshot."""
        if not self._loaded:
            self._loaded = True
            await self._load_snapshot()
        reloaded, records = await self._log.refresh()
        if reloaded:
            self._reset()
            self._loaded = True
        entries = self._entries
        for record in records:
            self._unsaved += 1
            kind = record.get("kind")
            if kind == "forget":
                session = record["session"]
                seen = self._seen()
                for doc, owner in enumerate(entries.session):
                    if owner == session and entries.text[doc]:
                        self._index.remove(doc, entries.text[doc])
                        seen.discard((session, entries.seq[doc]))  # numbers may be reused
                        entries.blank(doc)
            elif kind == "recall":
                if record["seq"] is not None:
                    seen = self._seen()
                    key = (record["session"], record["seq"])
                    if key in seen:
                        continue  # indexed twice by racing writers
                    seen.add(key)
                self._index.add(len(entries), record["text"])
                entries.append(record)

    async def _load_snapshot(self) -> None:
        if self._snapshots is None:
            return
        found = await read_snapshot(self._snapshots)
        if found is None:
            return
        marker, chunks = found
        self._entries, postings, lengths = load_chunks(chunks)
        self._index.restore(postings, lengths)
        self._seen_keys = None
        self._log.seek(marker["upto"], marker["last"])
        self.from_snapshot = marker["upto"]
        self._unsaved = 0

    async def save_snapshot(self) -> bool:
        """Save the in-process index as a snapshot now (after a refresh); return whether one
        was written (not for a native or snapshot-less index, nor an empty log)."""
        position = self._log.position
        if self._snapshots is None or position is None:
            return False
        await write_snapshot(
            self._snapshots, self._index, self._entries, position[0], position[1], self._clock()
        )
        self._unsaved = 0
        return True

    async def _snapshot_if_due(self) -> None:
        if self._unsaved < max(self.snapshot_every, len(self._entries) // 10):
            return
        try:
            await self.save_snapshot()
        except Exception:  # a search must not fail for want of a snapshot
            log.warning("recall snapshot not written; the next search retries", exc_info=True)

    async def forget(self, session_id: str) -> None:
        """Remove every entry of conversation ``session_id`` indexed so far (those of other
        conversations stay). Searches leave them out from now on; the stored text is blanked
        in place where the store can rewrite (all of this package's stores), and saved
        snapshots, which hold the text too, are deleted (the next search saves a new one)."""
        mark = uuid.uuid4().hex
        seqs = await self._log.append({"kind": "forget", "session": session_id, "id": mark})
        if seqs:
            await self._marks.append({"kind": "forget", "session": session_id, "before": seqs[0]})
        before_mark = True

        def blank(record: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal before_mark
            before_mark = before_mark and record.get("id") != mark
            mine = record.get("kind") == "recall" and record["session"] == session_id
            mine = mine and bool(record["text"])  # not blanked already
            return {**record, "role": "", "text": ""} if before_mark and mine else None

        await self._log.rewrite(blank)
        if self._saved is not None:
            await self._saved.clear_session()
        await self.refresh_marks()
        if self._loaded:
            await self.refresh()

    async def index(
        self,
        session_id: str,
        pairs: Sequence[tuple[int | None, Any]],
        *,
        backfill: bool = False,
        compacted: bool = False,
    ) -> None:
        """Index ``(seq, item)`` pairs of ``session_id`` in one write (with ``compacted``,
        note in the same write that the session was compacted); with ``backfill``, then mark
        the session's earlier history as indexed."""
        now = self._clock()
        records: list[dict[str, Any]] = []
        for seq, item in pairs:
            role, text = item_text(item)
            text = text[:INDEXED_CHARS]
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
        if compacted:
            records.append({"kind": "compacted", "session": session_id, "at": now})
        if records:
            await self._log.append(*records)
        if backfill:  # after the entries: a crash in between indexes the history twice
            await self._marks.append({"kind": "backfilled", "session": session_id, "at": now})
            self.backfilled.add(session_id)

    async def last_indexed(self, session_id: str) -> int:
        """The highest number of ``session_id`` among the newest log records naming it with
        one (0: none), read newest first in growing pages: where a fresh writer resumes."""
        store: Any = self.store
        if not supports(store, Capability.SEQUENCED):
            found = [r.get("seq") for r in await store.get_items() if _names(r, session_id)]
            return max(found, default=0)
        page, before = 64, None
        while True:
            rows = await store.get_sequenced_items(page, before=before)
            found = [r["seq"] for _, r in rows if _names(r, session_id)]
            if found or len(rows) < page:
                return max(found, default=0)
            page, before = min(page * 4, 4096), rows[0][0]

    async def since(self, cursor: int) -> tuple[int, list[dict[str, Any]], bool]:
        """What was indexed after ``cursor`` (a position in the log; 0 for its start):
        ``(new cursor, entries, compacted)``, the entries not forgotten since, each once, and
        whether a recall layer noted a compaction among them."""
        store: Any = self.store
        if supports(store, Capability.SEQUENCED):
            rows = list(await store.get_sequenced_items(after=cursor if cursor > 0 else None))
        else:
            rows = list(enumerate(await store.get_items(), start=1))[cursor:]
        entries: list[dict[str, Any]] = []
        seen: set[tuple[str, int]] = set()
        compacted = False
        for _seq, record in rows:
            kind = record.get("kind") if isinstance(record, dict) else None
            if kind == "recall" and record["text"]:
                key = (record["session"], record["seq"])
                if record["seq"] is None or key not in seen:
                    seen.add(key)
                    entries.append(record)
            elif kind == "forget":
                entries = [e for e in entries if e["session"] != record["session"]]
                seen = {key for key in seen if key[0] != record["session"]}
            elif kind == "compacted":
                compacted = True
        return (rows[-1][0] if rows else cursor), entries, compacted

    async def search(
        self,
        query: str,
        *,
        roles: Sequence[str] | None = None,
        limit: int = 5,
        start: float | None = None,
        end: float | None = None,
    ) -> list[RecallHit]:
        """The ``limit`` best entries for ``query`` by BM25 (the store's own ranking where it
        searches natively), after the role and time filters."""
        if limit <= 0:
            return []
        if self.native:
            return await self._search_store(query, roles, limit, start, end)
        await self.refresh()
        await self._snapshot_if_due()
        wanted = set(roles) if roles else None
        e = self._entries

        def keep(doc: int) -> bool:
            return (
                (wanted is None or e.role[doc] in wanted)
                and (start is None or e.at[doc] >= start)
                and (end is None or e.at[doc] <= end)
            )

        return [
            RecallHit(e.session[doc], e.seq[doc], e.role[doc], e.at[doc], e.text[doc], score)
            for doc, score in self._index.search(query, where=keep, top_k=limit)
        ]

    async def _search_store(
        self,
        query: str,
        roles: Sequence[str] | None,
        limit: int,
        start: float | None,
        end: float | None,
    ) -> list[RecallHit]:
        await self.refresh_marks()
        # Only recall records have a "text" (marks and forget records have none), so the only
        # filters are the caller's: each costs the store a look at every candidate.
        equal = {"role": list(roles)} if roles else None
        between = {"at": (start, end)} if start is not None or end is not None else None
        store: Any = self.store
        fetch = limit  # more only when duplicates (racing writers) or forgotten hits left few
        while True:
            rows = await store.search_text(query, limit=fetch, equal=equal, between=between)
            hits: list[RecallHit] = []
            seen: set[tuple[str, int]] = set()
            for number, e, score in rows:
                if not isinstance(e, dict) or not e.get("text"):
                    continue
                if number < self._forgotten.get(e["session"], -1):
                    continue  # forgotten, not blanked yet (or a store that cannot rewrite)
                if e["seq"] is not None:
                    if (e["session"], e["seq"]) in seen:
                        continue
                    seen.add((e["session"], e["seq"]))
                hits.append(
                    RecallHit(e["session"], e["seq"], e["role"], e["at"], e["text"], float(score))
                )
                if len(hits) == limit:
                    return hits
            if len(rows) < fetch:
                return hits
            fetch *= 4


def _names(record: Any, session_id: str) -> bool:
    """Whether ``record`` is a recall entry of item number ``seq`` of ``session_id``."""
    return (
        isinstance(record, dict)
        and record.get("kind") == "recall"
        and record.get("session") == session_id
        and isinstance(record.get("seq"), int)
    )


def _numbered(session: Session) -> Session | None:
    """The session whose sequence numbers the items written to ``session`` get: itself when
    it declares them, a CompactionSession's inner session (which keeps every original item
    and its number), else None."""
    if supports(session, Capability.SEQUENCED):
        return session
    if isinstance(session, CompactionSession):
        return session.inner
    return None


def _encrypts(session: Session) -> bool:
    """Whether ``session`` or a layer under it encrypts what it stores (ours or the SDK's)."""
    kinds: tuple[type, ...] = (EncryptedSession,)
    with contextlib.suppress(ImportError):  # the SDK's needs cryptography
        from agents.extensions.memory.encrypt_session import EncryptedSession as SDKEncrypted

        kinds += (SDKEncrypted,)
    return any(isinstance(layer, kinds) for layer in layers(session))


class RecallSession(SessionWrapper):
    """A layer that indexes every item written through it into a memory scope's recall index.

    Put it outermost (e.g. over a ``CompactionSession``) so items are indexed as written and
    stay searchable after compaction folds them away. Each entry carries the item's sequence
    number in the store (over a CompactionSession: its number in the inner session, which
    keeps the originals). The history the inner session held before is indexed on first
    write; ``clear_session`` also forgets the session's entries. An encrypted ``inner`` needs
    an encrypted recall log (a Memory over an encrypted root): refused otherwise.
    """

    run_compaction: Callable[..., Awaitable[None]]
    """Present when the inner session has the SDK's compaction hook (e.g. a
    CompactionSession): the Runner calls it on the outermost session after each turn."""

    def __init__(self, inner: Session, recall: RecallIndex) -> None:
        super().__init__(inner)
        if _encrypts(inner) and not _encrypts(recall.store):
            raise MemoryEditError(
                "this conversation is encrypted but the memory scope's recall log is not: "
                "its text would be stored in the clear. Open the Memory over an encrypted "
                "root (Memory(EncryptedSession(root, encryption_key=...))), or keep this "
                "conversation out of recall"
            )
        self.recall = recall
        self._numbered = _numbered(inner)
        self._cursor: int | None = None
        """The highest number this object saw indexed (None: not known yet)."""
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
        await self.recall.refresh_marks()
        if self.session_id in self.recall.backfilled:
            return
        numbered: Any = self._numbered
        if numbered is not None:
            pairs: list[tuple[int | None, Any]] = list(await numbered.get_sequenced_items())
            self._cursor = max((seq for seq, _ in pairs if seq is not None), default=0)
        else:
            pairs = [(None, item) for item in await self.inner.get_items()]
        await self.recall.index(self.session_id, pairs, backfill=True)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the inner session, then index them."""
        self._check_open()
        await self._backfill()
        numbered: Any = self._numbered
        pairs: list[tuple[int | None, Any]]
        resume = numbered is not None and self._cursor is None
        if resume:
            # Resume after the newest number indexed, not at the newest stored: an item a
            # writer stored but never indexed (it died in between) is indexed with this write
            # (test_an_item_stored_but_never_indexed_is_found_after_the_next_write).
            self._cursor = await self.recall.last_indexed(self.session_id)
        if supports(self.inner, Capability.SEQUENCED):
            seqs = await numbered.add_sequenced_items(items)
            pairs = list(zip(seqs, items, strict=True))
            if resume and seqs and seqs[0] > (self._cursor or 0) + 1:
                missed = await numbered.get_sequenced_items(after=self._cursor, before=seqs[0])
                pairs = [*missed, *pairs]
            self._cursor = seqs[-1] if seqs else self._cursor
        elif numbered is not None:
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
