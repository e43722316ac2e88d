"""``ResilientSession``: retries, a circuit breaker and a durable local spool over any backend."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ...core.capabilities import Capability, supports
from ...core.codec import DEFAULT_MAX_ITEM_BYTES, encode_batch
from ...core.mutation import run_to_completion
from ...core.options import check_int
from ...errors import BackendUnavailableError
from ..base import SessionWrapper, check_max_item_bytes
from ..window.pages import MAX_PAGE, SequencedPages
from .markers import batch_of, stamp, strip, strip_all
from .policy import BreakerState, CircuitBreaker, RetryPolicy
from .spool import SessionLock, Spool, SpooledBatch, SpoolUnreadableError

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session

logger = logging.getLogger("agent_sessions.resilient")

T = TypeVar("T")
State = Literal["healthy", "degraded", "replaying"]
_FIRST_PAGE = 64


@dataclass(frozen=True)
class ResilienceStatus:
    """What a :class:`ResilientSession` is doing.

    Attributes:
        state: ``healthy`` (writes go to the primary), ``degraded`` (writes go to the spool),
            or ``replaying`` (the spool is being written into the primary).
        spooled_batches: batches of this session waiting in the spool.
        spooled_items: items in them.
        breaker: the circuit breaker's state.
        last_error: the last unavailability seen, or None.
    """

    state: State
    spooled_batches: int
    spooled_items: int
    breaker: BreakerState
    last_error: str | None


if sys.version_info >= (3, 11):

    async def _bounded(awaitable: Awaitable[T], deadline: float) -> T:
        """Await ``awaitable``, cancelling it at the loop time ``deadline`` (no extra task)."""
        async with asyncio.timeout_at(deadline):
            return await awaitable

else:  # pragma: no cover - Python 3.10

    async def _bounded(awaitable: Awaitable[T], deadline: float) -> T:
        remaining = max(0.0, deadline - asyncio.get_running_loop().time())
        return await asyncio.wait_for(awaitable, remaining)


class _Turn:
    """``async with``: this object's lock (on ``loop``), then the session's :class:`SessionLock`
    (a class, not an asynccontextmanager: ~2.5 us less per call)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, shared: SessionLock) -> None:
        self.loop, self._local, self._shared = loop, asyncio.Lock(), shared

    async def __aenter__(self) -> None:
        await self._local.acquire()
        try:
            await self._shared.acquire()
        except BaseException:
            self._local.release()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._shared.release()
        self._local.release()


class _Down(Exception):
    """The primary stayed unavailable for a whole call (or the breaker is open)."""


class ResilientSession(SessionWrapper):
    """Keeps a session writable while its backend is down, losing and duplicating nothing
    (docs/resilient.md describes the behaviour in full).

    Calls to the primary are retried on :class:`BackendUnavailableError` (and on running past
    the policy's bound) under ``retry``; ``breaker`` stops calling a primary that keeps failing.
    A write that cannot reach it goes to ``spool``, an on-disk SQLite file, and succeeds; later
    writes follow it there (the order of writes is kept), and reads return the primary's items
    (while it is down: the newest ones this object saw) then the spooled ones. When the primary
    answers, the spool is replayed in order; every item carries its batch id, so each batch is
    stored and read exactly once, also after a lost reply or a crash. Any number of objects and
    processes may write one session through one spool file (:meth:`Spool.session_lock`); spool
    I/O and lock waits run in worker threads, never on the event loop.

    Args:
        inner: the primary, any Session.
        spool: path of the SQLite spool file (or a :class:`Spool` shared by several sessions).
        retry: the retry policy.
        breaker: the circuit breaker (share one between sessions of the same store).
        mirror_items: newest items kept in memory to serve reads while the primary is down.
        max_item_bytes: size limit applied to items before they are spooled.
    """

    keeps = "a spool of pending writes and a mirror of recent items per session id"

    def __init__(
        self,
        inner: Session,
        spool: str | os.PathLike[str] | Spool,
        *,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
        mirror_items: int = 2000,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    ) -> None:
        super().__init__(inner)
        check_int("mirror_items", mirror_items)
        self.max_item_bytes = check_max_item_bytes(max_item_bytes)
        self._owns_spool = not isinstance(spool, Spool)
        self.spool = spool if isinstance(spool, Spool) else Spool(spool)
        self.retry = retry if retry is not None else RetryPolicy()
        self.breaker = breaker if breaker is not None else CircuitBreaker()
        self.mirror_items = mirror_items
        self._sequenced = supports(inner, Capability.SEQUENCED)
        self._anchor: str | None = None  # a batch known to be in the primary
        self._counts: tuple[int, int] | None = None  # (batches, items) spooled, last seen
        self._state: State = "healthy"
        self._last_error: str | None = None
        self._mirror: list[TResponseInputItem] | None = None
        self._mirror_complete = False
        self._turn: _Turn | None = None

    @property
    def status(self) -> ResilienceStatus:
        """The state, spool size and breaker state as of this object's last call: never reads
        the spool file, so it never waits (see :meth:`current_status`)."""
        batches, items = self.spool.known_counts(self.session_id) or self._counts or (0, 0)
        state = self._state
        if state == "healthy" and (batches or self.breaker.state == "open"):
            state = "degraded"
        return ResilienceStatus(state, batches, items, self.breaker.state, self._last_error)

    async def current_status(self) -> ResilienceStatus:
        """:attr:`status` after reading the spool file (off the event loop), so it also counts
        what other writers of the session spooled."""
        await self._spooled_count()
        return self.status

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Write ``items`` as one batch to the primary, or to the spool while it is down."""
        if not items:
            await self.inner.add_items(items)
            return
        batch_id, stamped = stamp(items)
        async with self._locked():
            await self._replay_if_due()
            if await self._spooled_count():
                await self._to_spool(stamped, batch_id, attempted=False, anchor=None)
                return
            anchor = self._anchor
            try:
                await self._call(self._add_once(stamped, batch_id, anchor))
            except _Down:
                await self._to_spool(stamped, batch_id, attempted=True, anchor=anchor)
                return
            self._anchor = batch_id
            self._mirror_extend(list(items))

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items: the primary's, then any spooled ones."""
        limit = self.resolve_limit(limit)
        if limit is not None and limit <= 0:
            return []
        healthy = await self._spooled_count() == 0 and self._state == "healthy"
        if healthy and self.breaker.state == "closed":
            try:  # try/except: free on this hot path, unlike contextlib.suppress
                return await self._read_primary(limit)
            except _Down:
                pass
        async with self._locked():
            await self._replay_if_due()
            try:
                batches = await self._load_batches()
            except SpoolUnreadableError:
                batches = []
            return await self._merged(batches, limit)

    async def _merged(
        self, batches: list[SpooledBatch], limit: int | None
    ) -> list[TResponseInputItem]:
        """The primary's latest items, then the spooled batches it does not hold (a batch
        whose reply was lost may be in both)."""
        spooled = [strip(item) for batch in batches for item in batch.items]
        sent = {b.batch_id: b.anchor for b in batches if b.attempted}
        # the latest ``limit`` items, when the spool alone holds that many
        full = None if limit is None or len(spooled) < limit else spooled[len(spooled) - limit :]
        if full is not None and not sent:
            return full
        rest = None if limit is None else limit - len(spooled)
        try:
            if not sent:
                return await self._read_primary(rest) + spooled
            # read ``limit`` items: the spooled batches found there do not count
            raw = await self._call(lambda: self.inner.get_items(limit))
            stored = {batch_of(item) for item in raw}
            unseen = {bid: anchor for bid, anchor in sent.items() if bid not in stored}
            if unseen:
                stored |= await self._call(lambda: self._find(unseen))
        except _Down:  # the mirror holds no spooled batch
            return full if full is not None else self._from_mirror(rest) + spooled
        primary = strip_all(raw)
        self._remember(primary, limit)
        merged = primary + [
            strip(item) for b in batches if b.batch_id not in stored for item in b.items
        ]
        return merged if limit is None else merged[len(merged) - limit :]

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item: while anything is spooled, the newest spooled one.
        A pop that needs the primary (nothing spooled, or the newest batch was already sent and
        may be there) is tried once, never retried (it is not idempotent), and raises
        BackendUnavailableError while the primary is down."""
        async with self._locked():
            await self._replay_if_due()
            if await self._spooled_count():
                popped = await self._spool_write(self.spool.pop_newest, self.session_id)
                if popped is not None:
                    item, removed = popped
                    if not removed:
                        raise BackendUnavailableError(
                            f"cannot pop from {self.session_id!r} now: its newest write was "
                            "sent to the primary, which is unreachable, and may be stored "
                            "there; retry once the primary answers"
                        )
                    return strip(item)  # type: ignore[no-any-return]
            try:
                item = await self._call(self.inner.pop_item, retry=False)
            except _Down as down:
                raise BackendUnavailableError(
                    f"cannot pop from {self.session_id!r}: the primary is unreachable "
                    f"({self._last_error}); a pop is never retried, as it is not idempotent"
                ) from down.__cause__
            if item is not None and self._mirror:
                self._mirror.pop()
            return strip(item)  # type: ignore[no-any-return]

    async def clear_session(self) -> None:
        """Drop the spooled batches, then clear the primary (retried); raises
        BackendUnavailableError when it stays down."""
        async with self._locked():
            # logged; an unreadable spool has nothing that could be replayed
            with contextlib.suppress(SpoolUnreadableError):
                await self._spool_write(self.spool.clear, self.session_id)
            self._anchor = None
            try:
                await self._call(self.inner.clear_session)
            except _Down as down:
                raise BackendUnavailableError(
                    f"cannot clear {self.session_id!r}: the primary is unreachable "
                    f"({self._last_error}); its spooled writes were dropped, retry the clear"
                ) from down.__cause__
            self._mirror, self._mirror_complete = [], True
            self._set_state("healthy", "the session was cleared")

    async def replay(self) -> int:
        """Write the spooled batches into the primary, in order, exactly once; return how many
        were written (0 when another replay of this spool is running or the primary is down)."""
        async with self._locked():
            return await self._replay()

    async def _replay_if_due(self) -> None:
        if await self._spooled_count() and self.breaker.allows():
            await self._replay()

    async def _replay(self) -> int:
        lock = await asyncio.to_thread(self.spool.acquire_replay_lock)
        if lock is None:
            return 0
        with lock:  # closing it releases the lock, also on a crash
            batches = await self._load_batches()
            if not batches:
                return 0
            self._set_state("replaying", f"{len(batches)} spooled batches")
            done, anchor = 0, self._anchor
            try:
                sent = {b.batch_id: b.anchor for b in batches if b.attempted}
                found = await self._call(lambda: self._find(sent)) if sent else set()
                for batch in batches:
                    items = batch.items
                    if batch.batch_id not in found:
                        # Recorded as sent before it is sent; a pop may have shortened it.
                        claimed = await self._spool_write(self.spool.claim, batch.seq, anchor)
                        if claimed is None:
                            continue  # popped or cleared meanwhile
                        items = claimed
                        await self._call(self._add_once(items, batch.batch_id, anchor))
                        done += 1
                    await self._spool_write(self.spool.confirm, batch.seq)
                    anchor = self._anchor = batch.batch_id
                    self._mirror_extend(strip_all(items))
            except _Down:
                self._set_state("degraded", f"replay stopped: {self._last_error}")
                return done
            self._set_state("healthy", f"replayed {done} batches; the spool is empty")
            return done

    def _add_once(
        self, stamped: list[Any], batch_id: str, anchor: str | None
    ) -> Callable[[], Awaitable[None]]:
        """One attempt of writing a batch: after a failed attempt, look for it first."""
        tried = False

        async def attempt() -> None:
            nonlocal tried
            if tried and await self._find({batch_id: anchor}):
                return
            tried = True
            await self.inner.add_items(stamped)

        return attempt

    async def _find(self, anchors: dict[str, str | None]) -> set[str]:
        """Which of the batches ``anchors`` maps to their anchors are in the primary: each is
        looked for from the newest item back to its anchor (or the start of the history)."""
        pending = dict(anchors)
        found: set[str] = set()
        pages = SequencedPages(self.inner, _FIRST_PAGE) if self._sequenced else None
        size, seen = _FIRST_PAGE, 0
        while True:
            if pages is not None:
                page, end = await pages.older()
            else:
                got = await self.inner.get_items(seen + size)
                page = got[: len(got) - seen]
                end = len(got) < seen + size
                seen = len(got)
                size = min(size * 2, MAX_PAGE)
            for item in reversed(page):
                batch = batch_of(item)
                if batch is None:
                    continue
                if batch in pending:
                    found.add(batch)
                    del pending[batch]
                # Reached a batch's anchor without seeing it: it was not stored.
                for missing in [bid for bid, anchor in pending.items() if anchor == batch]:
                    del pending[missing]
                if not pending:
                    return found
            if end:
                return found

    async def _read_primary(self, limit: int | None) -> list[TResponseInputItem]:
        """The primary's latest ``limit`` (None or > 0) items, remembered in the mirror."""
        items = strip_all(await self._call(lambda: self.inner.get_items(limit)))
        self._remember(items, limit)
        return items

    async def _call(self, op: Callable[[], Awaitable[T]], *, retry: bool = True) -> T:
        """Run ``op`` against the primary under the retry policy and the breaker."""
        state = self.breaker.state
        if state == "open":
            raise _Down("the circuit breaker is open")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry.total_timeout
        # A half-open breaker allows one probe, not a series of retries.
        backoffs = self.retry.backoffs() if retry and state == "closed" else iter(())
        while True:
            try:
                result = await _bounded(op(), deadline)
            except (BackendUnavailableError, asyncio.TimeoutError) as exc:
                self._last_error = f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)
                delay = next(backoffs, None)
                if delay is None or deadline - loop.time() <= delay:
                    self.breaker.record_failure()  # one failed call, its retries included
                    raise _Down(self._last_error) from exc
                await asyncio.sleep(delay)
                continue
            self.breaker.record_success()
            return result

    async def _spooled_count(self) -> int:
        """Batches spooled for the session: cached while the spool's version is unchanged
        (no I/O), else read in a worker thread. An unreadable spool counts as empty (logged):
        the primary is still served."""
        counts = self.spool.known_counts(self.session_id)
        if counts is None:
            try:
                counts = await asyncio.to_thread(self.spool.counts, self.session_id)
            except SpoolUnreadableError as exc:
                if self._last_error != str(exc):
                    logger.error("%r: %s", self.session_id, exc)
                self._last_error, self._counts = str(exc), None
                return 0
        self._counts = counts
        return counts[0]

    async def _load_batches(self) -> list[SpooledBatch]:
        batches = await asyncio.to_thread(self.spool.batches, self.session_id)
        self._counts = (len(batches), sum(len(b.items) for b in batches))
        return batches

    async def _spool_write(self, method: Callable[..., T], *args: Any) -> T:
        """Run a spool write, then count the spool, in a worker thread; a cancelled caller
        waits for its end, so it has applied (or failed) when CancelledError arrives."""

        def write() -> tuple[T, tuple[int, int]]:
            return method(*args), self.spool.counts(self.session_id)

        self._counts = None
        result, self._counts = await run_to_completion(asyncio.to_thread(write))
        return result

    async def _to_spool(
        self, stamped: list[Any], batch_id: str, *, attempted: bool, anchor: str | None
    ) -> None:
        encoded = encode_batch(stamped, self.max_item_bytes)  # bad items: raise, spool nothing
        await self._spool_write(
            lambda: self.spool.append(
                self.session_id, batch_id, encoded, attempted=attempted, anchor=anchor
            )
        )
        if self._state != "degraded":
            self._set_state("degraded", f"writes go to the spool ({self._last_error})")

    def _remember(self, items: list[TResponseInputItem], limit: int | None) -> None:
        complete = limit is None or len(items) < limit
        mirror = self._mirror
        if complete or mirror is None or len(items) >= len(mirror):
            self._mirror, self._mirror_complete = list(items), complete
        elif mirror[len(mirror) - len(items) :] != items:
            self._mirror, self._mirror_complete = list(items), False
        self._trim_mirror()

    def _mirror_extend(self, items: list[TResponseInputItem]) -> None:
        if self._mirror is not None:
            self._mirror.extend(items)
            self._trim_mirror()

    def _trim_mirror(self) -> None:
        mirror = self._mirror
        if mirror is not None and len(mirror) > self.mirror_items:
            del mirror[: len(mirror) - self.mirror_items]
            self._mirror_complete = False

    def _from_mirror(self, limit: int | None) -> list[TResponseInputItem]:
        mirror = self._mirror or []
        short = limit is None or len(mirror) < limit
        if short and not self._mirror_complete:
            logger.warning(
                "%r: the primary is down; this read shows the %d newest items seen "
                "before (and the spooled ones), not the whole history",
                self.session_id,
                len(mirror),
            )
        return list(mirror if limit is None else mirror[len(mirror) - limit :] if limit else [])

    def _set_state(self, state: State, why: str) -> None:
        if state == self._state:
            return
        level = logging.WARNING if state == "degraded" else logging.INFO
        logger.log(level, "%r: %s -> %s (%s)", self.session_id, self._state, state, why)
        self._state = state

    def _locked(self) -> _Turn:
        """Exclusive use of the session by this call: first among this object's calls (waiting
        on the loop), then among every writer of the session through the spool file, in any
        thread or process (a pop never runs while another writer's add is unsettled)."""
        loop = asyncio.get_running_loop()
        if self._turn is None or self._turn.loop is not loop:
            self._turn = _Turn(loop, self.spool.session_lock(self.session_id))
        return self._turn

    def wrap_member(self, member: Session) -> Session:
        """Side stores get the same protection, sharing the spool and the breaker."""
        return ResilientSession(
            member,
            self.spool,
            retry=self.retry,
            breaker=self.breaker,
            mirror_items=self.mirror_items,
            max_item_bytes=self.max_item_bytes,
        )

    async def _release(self) -> None:
        """Close the primary, and the spool when this object opened it."""
        try:
            await super()._release()
        finally:
            if self._owns_spool:
                await asyncio.to_thread(self.spool.close)
