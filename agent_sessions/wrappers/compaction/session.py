"""``CompactionSession``: replaces an old part of a history by a summary, losing nothing.

The inner session is never rewritten. A compaction appends one *record* (summary items plus the
boundary they cover) to a side session; the view served to the Runner is the newest record's
summary followed by the inner items after its boundary. Lossless, crash-safe, concurrent writes
lose nothing, optionally in the background: docs/compaction.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.memory import SessionSettings

from ...core.base import pop_if_newest_is
from ...core.capabilities import (
    Capability,
    SupportsFamilyBatch,
    SupportsGuardedWrite,
    supports,
)
from ...core.closing import Closing
from ...core.codec import decode_item, encode_batch
from ...core.options import check_int
from ..base import SessionWrapper
from ..branching.store import read_family, read_rows
from ..foreign import expiring_layer, sequenced
from .boundary import choose_cut
from .records import CompactionRecord
from .running import RunningView
from .running import refresh as refresh_running
from .summarizers import ExtractiveSummarizer, Summarizer
from .text import item_text
from .tokens import TokenEstimator
from .trigger import (
    DEFAULT_TRIGGER_TOKENS,
    CompactionTrigger,
    CompactionTriggerContext,
    token_threshold_trigger,
)

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session
    from agents.memory.session import OpenAIResponsesCompactionArgs

logger = logging.getLogger("agent_sessions.compaction")

SIBLING_PURPOSE = "compaction"
_POP_LOCKS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, weakref.WeakValueDictionary[str, asyncio.Lock]
] = weakref.WeakKeyDictionary()
"""Per loop, a lock per session id in use, serialising this process's pops over an inner
that guards none (see ``pop_item``); an entry lives while an object holds it."""
_SEARCH_PAGE = 500


@dataclass(frozen=True)
class CompactionResult:
    """What one committed compaction did.

    Attributes:
        record: the committed record (now in force).
        compacted_items: original items this compaction archived.
        kept_items: original items left in the view after the summary.
        estimated_tokens_before: token estimate of the view before compacting.
    """

    record: CompactionRecord
    compacted_items: int
    kept_items: int
    estimated_tokens_before: int


class _Aborted(Exception):
    """The history changed under a compaction; it is dropped, the view stays as it was."""


class CompactionSession(SessionWrapper):
    """A session whose old history is replaced by a summary, keeping the originals.

    Args:
        inner: any Session holding the original items (never rewritten).
        summarizer: makes the summary; default :class:`ExtractiveSummarizer` (no model).
        should_trigger_compaction: decides from a :class:`CompactionTriggerContext` (may be async);
            default: estimated tokens of the view >= :data:`DEFAULT_TRIGGER_TOKENS`.
        keep_last: at least this many of the newest view items are never summarised.
        background: when True, ``run_compaction`` schedules the work and returns at once.
        sibling_factory: opens the side session for records, given its derived id; needed when
            ``inner`` does not offer ``sibling()`` (e.g. the SDK's own session classes).
        compact_on_write: also consult the trigger after every ``add_items`` (for use without
            the Runner, whose hook already does so after each turn). A failure there is logged
            and kept in ``last_error``, never raised: the items were written.
        token_estimator: how tokens are estimated (default tiktoken, else an offline estimate).
        session_settings: SDK settings, set on the inner session (the stack shares one).
    """

    numbering = staticmethod(sequenced)
    keeps = "compaction records and archived originals per session id"
    passes = frozenset()

    def __init__(
        self,
        inner: Session,
        summarizer: Summarizer | None = None,
        should_trigger_compaction: CompactionTrigger | None = None,
        keep_last: int = 8,
        background: bool = False,
        *,
        sibling_factory: Callable[[str], Session] | None = None,
        compact_on_write: bool = False,
        token_estimator: TokenEstimator | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        check_int("keep_last", keep_last)
        summarizer = summarizer if summarizer is not None else ExtractiveSummarizer()
        if not callable(getattr(summarizer, "summarize", None)):
            raise TypeError("summarizer must have an async summarize(items, previous_summary=)")
        super().__init__(inner, sibling_factory=sibling_factory, session_settings=session_settings)
        self.summarizer = summarizer
        self.should_trigger_compaction: CompactionTrigger = (
            should_trigger_compaction or token_threshold_trigger(DEFAULT_TRIGGER_TOKENS)
        )
        self.keep_last = keep_last
        self.background = background
        self.compact_on_write = compact_on_write
        self.token_estimator = token_estimator if token_estimator is not None else TokenEstimator()
        self._records: Session | None = None
        self._records_newest: int | None = None
        """The records' newest sequence number as last read by a pop (None: no records)."""
        self._lock_set: tuple[asyncio.AbstractEventLoop, asyncio.Lock, asyncio.Lock] | None = None
        self._clears = 0
        self._running: RunningView | None = None
        self._record_seen: Any = _UNREAD
        """The record ``get_items`` read since the last check (which reuses it once)."""
        self._appended: tuple[RunningView, list[tuple[int, TResponseInputItem]]] | None = None
        """(view, pairs): every inner write since ``view`` was refreshed was a guarded
        ``_append_known`` of ``pairs``, so both are the whole tail and the next check needs no
        read. Valid while ``view`` is ``_running``; None: the check reads."""
        self._summary_tokens: tuple[str, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._pop_held: asyncio.Lock | None = None
        self._queued: tuple[bool, str | None] | None = None
        self.last_error: BaseException | None = None
        """The last error of a compaction that was logged instead of raised."""
        self.compactions = 0
        """Compactions committed through this object."""

    @property
    def _sibling(self) -> Session:
        """The side store of the records, opened on first use (an add never needs it) and
        kept: a fresh object per request asks the family once, not on every use."""
        if self._records is None:
            self._records = self.side_store(SIBLING_PURPOSE)
        return self._records

    @property
    def _guarded(self) -> bool:
        """Whether pops can be guarded by the records' newest number (see ``_pop_guarded``)."""
        return Capability.GUARDED_WRITE in self._inner_caps and supports(
            self._sibling, Capability.SEQUENCED
        )

    @functools.cached_property
    def _incremental(self) -> bool:
        """Whether the check may read only the items added since the last one: not when
        expiry removes items without a pop, which it cannot notice."""
        return expiring_layer(self.inner) is None

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items of the view (summary, then newer items)."""
        self._check_open()
        limit = self.resolve_limit(limit)
        if limit is not None and limit <= 0:
            return []
        if limit is None:
            record = await self._latest_record()
            if record is None:
                return await self.inner.get_items(None)
            rows = await read_rows(self.inner, after=record.boundary)
            return list(record.summary) + [item for _, item in rows]
        # Both reads at once (one round trip where the store serves both, else one wait
        # instead of two): the newest ``limit`` items after the boundary are the newest
        # ``limit`` items less those at or below it.
        if Capability.FAMILY_BATCH in self._inner_caps:
            family: SupportsFamilyBatch = self.inner  # type: ignore[assignment]
            rows, pairs = await family.get_sequenced_family(
                [(self._sibling, 1, None, None), (self.inner, limit, None, None)]
            )
            record = self._record_of(rows[-1][1]) if rows else None
        else:
            record, pairs = await asyncio.gather(
                self._latest_record(), read_rows(self.inner, limit)
            )
        self._record_seen = record
        if record is None:
            return [item for _, item in pairs]
        tail = [item for seq, item in pairs if seq > record.boundary]
        room = limit - len(tail)
        return (list(record.summary[-room:]) if room > 0 else []) + tail

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the inner session (always after any compaction boundary)."""
        self._check_open()
        if not await self._append_known(items):
            await self.inner.add_items(items)
        if not self.compact_on_write or not items:
            return
        if self.background:
            await self.run_compaction()
            return
        await self._compact_or_log("compaction after a write to", force=False, response_id=None)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item of the view.

        When only summary items are left, the last of them is removed (by committing a record
        without it) and returned; archived originals are never popped.
        """
        self._check_open()
        self._appended = None
        async with self._locks()[0]:
            if self._guarded:
                return await self._pop_guarded()
            # Nothing in the store guards the record a pop commits (a summary item's): two
            # objects' pops from one record in force would return the same item. Serialised
            # here among this process's objects (as ForeignSession serialises its writers).
            async with self._pop_lock():
                while True:
                    record = await self._latest_record()
                    if record is None:
                        return await self.inner.pop_item()
                    tail = await read_rows(self.inner, 1, after=record.boundary)
                    if not tail:
                        return await self._pop_summary(record)  # type: ignore[no-any-return]
                    popped = await self._pop_read(tail[-1][1])
                    if popped is not _UNREAD:
                        return popped  # type: ignore[no-any-return]

    def _pop_lock(self) -> asyncio.Lock:
        """This process's pop lock for this session id (kept while this object lives)."""
        locks = _POP_LOCKS.setdefault(asyncio.get_running_loop(), weakref.WeakValueDictionary())
        self._pop_held = locks.setdefault(self.session_id, asyncio.Lock())
        return self._pop_held

    async def _pop_read(self, item: TResponseInputItem) -> Any:
        """Pop the newest item if it is still ``item`` (without CHECKED_POP: whatever is
        newest); _UNREAD when another object popped meanwhile."""
        if Capability.CHECKED_POP not in self._inner_caps:
            return await self.inner.pop_item()
        done, popped = await pop_if_newest_is(self.inner, item)
        return popped if done and popped is not None else _UNREAD

    async def _pop_guarded(self) -> TResponseInputItem | None:
        """``pop_item`` guarded by the records' newest number: the store pops only while the
        record the item was chosen under is in force (else the pop reads again)."""
        guarded: SupportsGuardedWrite = self.inner  # type: ignore[assignment]
        tried: Any = _UNREAD
        if self._records_newest is None:
            done, item = await guarded.pop_if_newest(self._sibling, None)
            if done:
                return item  # type: ignore[no-any-return]
            tried = None
        while True:
            rows, pairs = await read_family(
                [(self._sibling, 1, None, None), (self.inner, 1, None, None)]
            )
            seq = self._records_newest = rows[-1][0] if rows else None
            if rows:
                record = self._record_of(rows[-1][1])
                if not pairs or pairs[-1][0] <= record.boundary:
                    # Guarded by the records: another object's pop or compaction committed
                    # first makes the store decline, and this pop reads again.
                    guard = None if (seq, None) == tried else seq
                    popped = await self._pop_summary(record, guard)
                    if popped is not _UNREAD:
                        return popped  # type: ignore[no-any-return]
                    tried = (seq, None)
                    continue
            if not pairs:
                return None
            # Guarded by both: a concurrent compaction (records) or pop (inner) makes the store
            # decline, so an item the records now archive is never popped.
            state = (seq, pairs[-1][0])
            if state == tried:  # declined with nothing changed: no one-step guard here
                popped = await self._pop_read(pairs[-1][1])
                if popped is not _UNREAD:
                    return popped  # type: ignore[no-any-return]
                continue
            done, item = await guarded.pop_if_newest(self._sibling, seq, newest=state[1])
            if done:
                return item  # type: ignore[no-any-return]
            tried = state

    async def _pop_summary(self, record: CompactionRecord, guard: int | None = None) -> Any:
        """Pop ``record``'s last summary item by committing a record without it; with
        ``guard`` (``record``'s number), only while it is the newest record, else (the store
        declined) _UNREAD."""
        if not record.summary:
            return None
        popped = record.summary[-1]
        shorter = CompactionRecord(
            record.boundary, list(record.summary[:-1]), record.archived, record.summarizer, "pop"
        )
        sibling: Any = self._sibling
        if guard is not None and supports(sibling, Capability.GUARDED_WRITE):
            if await sibling.append_if_newest(sibling, guard, [shorter.to_item()]) is None:
                return _UNREAD
        else:
            await sibling.add_items([shorter.to_item()])
        return popped

    async def clear_session(self) -> None:
        """Delete the view, the archived originals and the compaction records."""
        self._check_open()
        async with self._locks()[0]:
            self._clears += 1
            self._running = self._appended = self._records_newest = None
            self._record_seen = _UNREAD
            # Records first: a crash in between leaves the full original history visible
            # rather than a stale boundary over a renumbered inner session.
            await self._sibling.clear_session()
            await self.inner.clear_session()

    async def run_compaction(self, args: OpenAIResponsesCompactionArgs | None = None) -> None:
        """The SDK's hook, called by the Runner after each turn's write.

        Compacts when ``args["force"]`` is true or the trigger says so. With ``background=True``
        it only schedules that (at most one compaction runs per session object; calls meanwhile
        are coalesced into one more run) and errors are logged, never raised; otherwise it
        finishes first and raises what the summarizer or store raised.
        """
        self._check_open()
        force = bool(args.get("force", False)) if args else False
        response_id = args.get("response_id") if args else None
        if not self.background:
            await self.compact(force=force, response_id=response_id)
            return
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done():
            if self._task.get_loop() is loop or not self._task.get_loop().is_closed():
                queued_force = force or (self._queued is not None and self._queued[0])
                self._queued = (queued_force, response_id)
                return
            self._queued = None  # left behind by a closed event loop; it never committed
        self._task = loop.create_task(
            self._background(force, response_id), name=f"compaction {self.session_id!r}"
        )

    async def compact(
        self, *, force: bool = True, response_id: str | None = None
    ) -> CompactionResult | None:
        """Compact now (``force=False``: only if the trigger agrees); wait for the result.

        Returns None when nothing was compacted (trigger declined, nothing outside
        ``keep_last`` can be cut safely, or the history changed meanwhile).
        """
        self._check_open()
        async with self._locks()[1]:
            try:
                return await self._compact(force, response_id)
            except _Aborted as why:
                logger.info("compaction of %r dropped: %s", self.session_id, why)
                return None

    async def wait_for_compaction(self) -> None:
        """Wait until no background compaction is running or queued."""
        while self._task is not None and not self._task.done():
            task = self._task
            if task.get_loop() is not asyncio.get_running_loop():
                logger.warning("a background compaction belongs to another event loop")
                return
            await asyncio.wait({task})  # its errors are logged by the task itself

    @property
    def compaction_pending(self) -> bool:
        """Whether a background compaction is running or queued."""
        return self._task is not None and not self._task.done()

    async def get_archived_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the original items the summary stands for (the latest ``limit``), oldest
        first."""
        self._check_open()
        if limit is not None and limit <= 0:
            return []
        record = await self._latest_record()
        if record is None:
            return []
        pairs = await read_rows(self.inner, limit, before=record.boundary + 1)
        return [item for _, item in pairs]

    async def search_archive(
        self, text: str, *, limit: int | None = None
    ) -> list[TResponseInputItem]:
        """Return archived items whose text contains ``text`` (case-insensitive), oldest first;
        with ``limit``, the latest ``limit`` matches. Scans the archive newest first, in pages."""
        self._check_open()
        needle = text.casefold()
        if not needle:
            raise ValueError("search text must not be empty")
        record = await self._latest_record()
        if record is None or (limit is not None and limit <= 0):
            return []
        found: list[TResponseInputItem] = []
        before = record.boundary + 1
        while True:
            page = await read_rows(self.inner, _SEARCH_PAGE, before=before)
            if not page:  # only an empty page ends it: reads leave unreadable items out
                return found[::-1]
            for _, item in reversed(page):
                if needle in item_text(item).casefold():
                    found.append(item)
                    if limit is not None and len(found) >= limit:
                        return found[::-1]
            before = page[0][0]

    async def get_compaction_records(self) -> list[CompactionRecord]:
        """Return every committed record, oldest first (the last one is in force)."""
        self._check_open()
        return [self._record_of(item) for item in await self._sibling.get_items()]

    async def prune_archive(self, *, keep_compactions: int = 0) -> int:
        """Delete the originals archived by all compactions but the newest ``keep_compactions``
        in one atomic range delete; return how many were deleted.

        The view, the records (``archived`` still counts pruned items) and items written
        meanwhile are never touched.

        Raises:
            ValueError: ``keep_compactions`` is not an int >= 0.
            NotImplementedError: the inner session lacks sequenced items or range deletion.
        """
        self._check_open()
        check_int("keep_compactions", keep_compactions)
        inner = self.inner
        if Capability.RANGE_DELETE not in self._inner_caps:
            raise NotImplementedError(
                f"prune_archive needs an inner session with sequence numbers and atomic range "
                f"deletion (agent_sessions' in-memory and SQLite backends, also under "
                f"EncryptedSession without ttl=); {type(inner).__name__} lacks them, and "
                "rewriting its history through the Session API could lose concurrent writes "
                "or break the view on a crash. The archive is kept; clear_session() deletes "
                "everything"
            )
        async with self._locks()[0]:
            records = await self.get_compaction_records()
            # Pop records repeat the boundary of the compaction before them.
            boundaries = [r.boundary for r in records if r.reason == "compaction"]
            if len(boundaries) <= keep_compactions:
                return 0
            # Safe against concurrent writers and clears (also in other processes): a range
            # deleting store never reuses sequence numbers, so everything newer than this
            # committed boundary stays.
            deleted: int = await inner.delete_items(  # type: ignore[attr-defined]
                before=boundaries[-1 - keep_compactions] + 1
            )
            return deleted

    async def get_summary_and_tail(
        self, limit: int | None = None
    ) -> tuple[list[TResponseInputItem], list[TResponseInputItem]]:
        """Return the two parts of the view read together: the summary in force (empty before
        the first compaction) and the latest ``limit`` items after it (all when None), oldest
        first. ``WindowSession`` uses it to keep the summary in front of its window."""
        self._check_open()
        record = await self._latest_record()
        summary = list(record.summary) if record is not None else []
        tail = await read_rows(self.inner, limit, after=record.boundary if record else None)
        return summary, [item for _, item in tail]

    def close(self, *, cancel_pending: bool = False) -> Closing:
        """Finish (or, with ``cancel_pending``, cancel) a background compaction, then close the
        record session and the inner session. Idempotent; works called bare or awaited."""
        self._cancel_pending = cancel_pending
        return super().close()

    def _idle(self) -> bool:
        return self._task is None or self._task.done()

    async def _release(self) -> None:
        task = self._task
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            self._queued = None
            if self._cancel_pending:
                task.cancel()
            await asyncio.wait({task})
        await super()._release()

    def wrap_member(self, member: Session) -> Session:
        """Records are read and written whole: the record store needs no sequence numbers."""
        return member

    def __repr__(self) -> str:
        return f"CompactionSession({self.inner!r}, summarizer={self.summarizer!r})"

    def _locks(self) -> tuple[asyncio.Lock, asyncio.Lock]:
        """(mutation lock, compaction lock), made for the running event loop."""
        loop = asyncio.get_running_loop()
        if self._lock_set is None or self._lock_set[0] is not loop:
            self._lock_set = (loop, asyncio.Lock(), asyncio.Lock())
        return self._lock_set[1], self._lock_set[2]

    async def _append_known(self, items: list[TResponseInputItem]) -> bool:
        """Append ``items`` only while the inner session's newest item is the one this object
        knows (one atomic step), and remember them for the next check; False: nothing was
        written."""
        state, inner = self._appended, self.inner
        if (
            state is None
            or state[0] is not self._running
            or not state[0].seqs
            or Capability.GUARDED_WRITE not in self._inner_caps
        ):
            self._appended = None
            return False
        known, pairs = state
        expected = pairs[-1][0] if pairs else known.seqs[-1]
        guarded: SupportsGuardedWrite = inner  # type: ignore[assignment]
        seqs = await guarded.append_if_newest(inner, expected, items)
        if seqs is None:
            self._appended = None
            return False
        if self._appended is not state or len(pairs) + len(seqs) > _MAX_APPENDED:
            self._appended = None  # a check or another write ran meanwhile
            return True
        # As a read returns them (the append checked their size against the store's cap).
        stored = [decode_item(text) for text in encode_batch(items, sys.maxsize)]
        self._appended = (known, pairs + list(zip(seqs, stored, strict=True)))
        return True

    async def _latest_record(self) -> CompactionRecord | None:
        items = await self._sibling.get_items(limit=1)
        return self._record_of(items[-1]) if items else None

    def _record_of(self, item: Any) -> CompactionRecord:
        return CompactionRecord.from_item(item, f"compaction records of {self.session_id!r}")

    async def _compact_or_log(self, what: str, force: bool, response_id: str | None) -> None:
        """``compact``, logging a failure and keeping it in ``last_error`` instead of raising."""
        try:
            await self.compact(force=force, response_id=response_id)
        except Exception as exc:
            self.last_error = exc
            logger.warning(
                "%s %r failed; the history is unchanged", what, self.session_id, exc_info=True
            )

    async def _background(self, force: bool, response_id: str | None) -> None:
        while True:
            await self._compact_or_log("background compaction of", force, response_id)
            if self._queued is None or self._closed:
                return
            force, response_id = self._queued
            self._queued = None

    async def _compact(self, force: bool, response_id: str | None) -> CompactionResult | None:
        generation = self._clears
        known = self._running if self._incremental and not force else None
        seen, self._record_seen = self._record_seen, _UNREAD
        if known is not None and known.seqs:
            # The items since the newest known one; the record too unless this turn's
            # get_items read it (then the trigger sees the view as of the turn's start plus
            # the items written since).
            after = known.seqs[-1] - 1
            appended = self._appended
            newer: list[tuple[int, TResponseInputItem]] | None = None
            if appended is not None and appended[0] is known and appended[1]:
                # Every write since the last check was ours and guarded: the items need no
                # read. (A write by another object after our last one is seen by the next
                # check: our next guarded append fails and that check reads.)
                newer = [(known.seqs[-1], known.view[-1]), *appended[1]]
            if seen is not _UNREAD and (seen.id if seen else None) == known.record_id:
                record = seen
                if newer is None:
                    newer = await read_rows(self.inner, None, after=after)
            else:
                seen = _UNREAD
                if newer is not None:
                    record = await self._latest_record()
                else:
                    record, newer = await asyncio.gather(
                        self._latest_record(), read_rows(self.inner, None, after=after)
                    )
            known.prefetched = (after, newer)
        else:
            seen = _UNREAD
            record = await self._latest_record()
        # Deciding reads only the items written since the last check; compacting re-reads
        # the whole tail, so a summary never works from a stale view.
        if not force and not await self._decide(record, response_id, incremental=True):
            return None
        if seen is not _UNREAD:
            # Decided on the record as last read; another object may have compacted since
            # (that only lowers the estimate). Compact only if it is still the one in force.
            fresh = await self._latest_record()
            if (fresh.id if fresh else None) != (record.id if record else None):
                record = fresh
                if not await self._decide(record, response_id, incremental=True):
                    return None
        running = await self._refresh_running(record, incremental=False)
        tail = list(zip(running.seqs, running.tail, strict=True))
        tokens = await self._summary_token_count(record) + running.tokens
        summary = list(record.summary) if record is not None else []
        view = summary + running.tail
        cut = choose_cut(view, lowest=len(summary) + 1, highest=len(view) - self.keep_last)
        if cut is None:
            logger.debug("compaction of %r: no safe cut outside keep_last", self.session_id)
            return None
        covered = tail[: cut - len(summary)]
        new_summary = await self.summarizer.summarize(
            [item for _, item in covered], previous_summary=summary
        )
        _check_summary(new_summary)
        new_record = CompactionRecord(
            boundary=covered[-1][0],
            summary=list(new_summary),
            archived=(record.archived if record is not None else 0) + len(covered),
            summarizer=str(getattr(self.summarizer, "name", type(self.summarizer).__name__)),
        )
        # Over an inner that guards no pop, also this process's pops of the session wait (see
        # pop_item): none lands between the check and the commit.
        unguarded = contextlib.nullcontext() if self._guarded else self._pop_lock()
        async with self._locks()[0], unguarded:
            await self._commit(generation, record, covered, new_record)
        self.compactions += 1
        kept = len(tail) - len(covered)
        logger.debug("compacted %r: %d archived, %d kept", self.session_id, len(covered), kept)
        return CompactionResult(new_record, len(covered), kept, tokens)

    async def _decide(
        self, record: CompactionRecord | None, response_id: str | None, *, incremental: bool
    ) -> bool:
        """Ask the trigger about the view, read incrementally when that is provably safe."""
        running = await self._refresh_running(record, incremental=incremental)
        sizes = len(running.view), len(running.candidates)
        context: CompactionTriggerContext = {
            "session_id": self.session_id,
            "response_id": response_id,
            "session_items": running.view,
            "compaction_candidate_items": running.candidates,
            "item_count": len(running.view),
            "items_since_last_compaction": len(running.seqs),
            "archived_item_count": record.archived if record is not None else 0,
            "estimated_tokens": await self._summary_token_count(record) + running.tokens,
            "token_estimate_method": self.token_estimator.method,
        }
        try:
            decision = self.should_trigger_compaction(context)
            if inspect.isawaitable(decision):
                decision = await decision
        finally:
            if not running.unchanged(*sizes):
                self._running = None  # the trigger changed the lists it was shown
        return bool(decision)

    async def _refresh_running(
        self, record: CompactionRecord | None, *, incremental: bool
    ) -> RunningView:
        self._running = await refresh_running(
            self._running,
            self.inner,
            record_id=record.id if record is not None else None,
            summary=list(record.summary) if record is not None else [],
            boundary=record.boundary if record is not None else None,
            generation=self._clears,
            incremental=incremental and self._incremental,
            estimator=self.token_estimator,
        )
        # Just read (or extended by guarded appends): complete, so later appends may be known.
        self._appended = (self._running, []) if self._incremental else None
        return self._running

    async def _summary_token_count(self, record: CompactionRecord | None) -> int:
        if record is None:
            return 0
        if self._summary_tokens is None or self._summary_tokens[0] != record.id:
            counts = await self.token_estimator.count_items(record.summary)
            self._summary_tokens = (record.id, sum(counts))
        return self._summary_tokens[1]

    async def _commit(
        self,
        generation: int,
        record: CompactionRecord | None,
        covered: list[tuple[int, TResponseInputItem]],
        new_record: CompactionRecord,
    ) -> None:
        """Check that nothing summarised changed, then append ``new_record``. Where the store
        guards writes, the append is guarded by the session's newest number (checked again
        when it moved), so a pop by another object cannot land in between."""
        sibling: Any = self._sibling
        guard = self._guarded and supports(sibling, Capability.GUARDED_WRITE)
        if guard and getattr(sibling, "unlisted", None) is not None:
            # A records store this object only read whole still waits to be listed in its
            # family, which its guarded writes refuse: a sequenced read of a record lists it.
            await read_rows(sibling, 1)
        last: Any = _UNREAD
        for _ in range(_COMMIT_TRIES):
            seq = None
            if guard:  # the newest number before the check: a pop after it changes it
                newest = await read_rows(self.inner, 1)
                seq = newest[-1][0] if newest else None
            await self._verify_unchanged(generation, record, covered)
            if not guard or seq == last:  # (refused with nothing changed: cannot guard)
                break
            if await sibling.append_if_newest(self.inner, seq, [new_record.to_item()]) is not None:
                return
            last = seq
        else:
            raise _Aborted("the session kept changing while committing")
        await sibling.add_items([new_record.to_item()])

    async def _verify_unchanged(
        self,
        generation: int,
        record: CompactionRecord | None,
        covered: list[tuple[int, TResponseInputItem]],
    ) -> None:
        """Raise _Aborted unless the record in force and the covered items are as read."""
        if self._clears != generation:
            raise _Aborted("the session was cleared meanwhile")
        latest = await self._latest_record()
        if (latest.id if latest else None) != (record.id if record else None):
            raise _Aborted("another compaction or pop committed meanwhile")
        old_boundary = record.boundary if record is not None else 0
        present = await self.inner.count_items(  # type: ignore[attr-defined]
            after=old_boundary, before=covered[-1][0] + 1
        )
        if present != len(covered):
            raise _Aborted("summarised items were popped meanwhile")


_UNREAD = object()
_COMMIT_TRIES = 8
"""Guarded commits tried while other objects keep writing, before the compaction is dropped."""
_MAX_APPENDED = 1000
"""Most items remembered between two checks; past that the check reads (bounded memory when
the hook is not called, e.g. without the Runner)."""


def _check_summary(summary: Any) -> None:
    if not isinstance(summary, list) or not summary:
        raise ValueError(
            f"the summarizer must return a non-empty list of items, got {type(summary).__name__}"
            + (" (empty)" if isinstance(summary, list) else "")
        )
    for index, item in enumerate(summary):
        if not isinstance(item, dict) or not ("type" in item or "role" in item):
            raise ValueError(
                f"summary item {index} is not an input item (a dict with 'role' or 'type'), "
                f"it is a {type(item).__name__}"
                + (f" with keys {sorted(map(str, item))}" if isinstance(item, dict) else "")
            )
