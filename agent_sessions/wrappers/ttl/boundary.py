"""Where a TTL session's visible history starts, by sequence number, for ranged reads.

An item's death may depend on items outside a ranged read (a gap longer than ``ttl`` after it),
so :class:`Boundary` keeps the live items' numbers and timestamps per session object and answers
"the newest dead item" for any ``now``: permanent deaths (an envelope not ours, a sliding gap)
are folded into ``floor``; deaths that come with time (``item_ttl``, absolute ``ttl``, a stale
sliding session) by binary search over suffix minima, then folded in too. A refresh re-reads the
newest few known items and anything newer (one ranged read); a clear or a deep pop rebuilds.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Callable
from itertools import accumulate
from typing import Any

_TAIL = 8
"""How many of the newest known items a refresh re-reads to notice pops."""
_PAGE = 200

Dead = Callable[[Any, float, float], bool]
"""``dead(envelope, newer_t, now)``: the TTL layer's rule for one item."""
Time = Callable[[Any, str], "float | None"]


class Boundary:
    """The live items of one TTL session, as far as expiry is concerned."""

    floor: int  # the newest item known dead (0: none); dead items stay dead
    seqs: list[int]  # the items after it, alive when last asked, oldest first ...
    ts: list[float]  # ... their write times ...
    _cs: list[float]  # ... and lifetime starts (absolute mode; 0.0 otherwise)
    _tmin: list[float]  # suffix minimum of ts
    _cmin: list[float]  # suffix minimum of _cs

    def __init__(
        self, *, ttl: float | None, sliding: bool, item_ttl: float | None, dead: Dead, time: Time
    ) -> None:
        self.ttl, self.sliding, self.item_ttl = ttl, sliding, item_ttl
        self._dead, self._time = dead, time
        self.built = False
        self.lock = asyncio.Lock()
        """Held by the session across a refresh and an answer."""
        self._reset_to(0)

    # -- answering -----------------------------------------------------------------------------

    def newest_dead(self, now: float, cut: float | None = None) -> int:
        """The sequence number of the newest dead item at ``now`` (0: none is dead); items
        written before ``cut`` (when given) count as dead too.

        Dead items stay dead, so they are folded into ``floor`` and forgotten: the tracker
        holds only items that are still alive."""
        if not self.seqs:
            return self.floor
        best = -1
        if cut is not None:
            best = bisect_left(self._tmin, cut) - 1
        if self.ttl is not None and self.sliding and now - self.ts[-1] > self.ttl:
            best = len(self.seqs) - 1
        if self.item_ttl is not None:
            best = max(best, bisect_left(self._tmin, now - self.item_ttl) - 1)
        if self.ttl is not None and not self.sliding:
            best = max(best, bisect_left(self._cmin, now - self.ttl) - 1)
        if best >= 0:
            self._forget_oldest(best + 1)
        return self.floor

    # -- keeping up ----------------------------------------------------------------------------

    async def refresh(self, inner: Any, now: float) -> None:
        """Bring the live items up to date with the store (one ranged read when nothing
        unusual happened)."""
        if not self.built:
            await self._rebuild(inner, now)
            return
        tail = self.seqs[-_TAIL:]
        deep = len(self.seqs) > _TAIL
        # Without many live items the floor row itself is re-read: a damaged or foreign row
        # hides what is older only while it is stored, so popping it must be noticed.
        expect = tail if deep or not self.floor else [self.floor, *tail]
        rows = await inner.get_sequenced_items(after=expect[0] - 1 if expect else self.floor)
        kept = 0
        while kept < len(expect) and kept < len(rows) and rows[kept][0] == expect[kept]:
            kept += 1
        if kept < len(expect):
            # Only pops of the newest known live items are patched up; anything else (a clear,
            # more pops than the tail holds, the floor row gone, a hole) is read again.
            floor_gone = expect is not tail and kept == 0
            if (
                (deep and kept == 0)
                or floor_gone
                or (kept < len(rows) and rows[kept][0] <= expect[-1])
            ):
                await self._rebuild(inner, now)
                return
            self._truncate(len(self.seqs) - (len(expect) - kept))
        self._extend(rows[kept:])

    async def _rebuild(self, inner: Any, now: float) -> None:
        self._reset_to(0)
        self.floor, live = await newest_dead_by_scan(
            inner, lambda envelope, newer_t: self._dead(envelope, newer_t, now), now
        )
        self._extend(live)
        self.built = True

    def _truncate(self, n: int) -> None:
        """Forget all but the oldest ``n`` live items (the others were popped)."""
        del self.seqs[n:], self.ts[n:], self._cs[n:]
        self._tmin = _suffix_min(self.ts)
        self._cmin = _suffix_min(self._cs)

    def _extend(self, rows: list[tuple[int, Any]]) -> None:
        """Append rows newer than every known one, oldest first."""
        for seq, envelope in rows:
            t = self._time(envelope, "t")
            c = self._time(envelope, "c") if self.ttl is not None and not self.sliding else 0.0
            if t is None or c is None:
                self._reset_to(seq)  # never shown (not ours, or no lifetime start)
                continue
            if self.ttl is not None and self.sliding and self.ts and t - self.ts[-1] > self.ttl:
                self._reset_to(self.seqs[-1])  # the session died before this write
            self.seqs.append(seq)
            self.ts.append(t)
            self._cs.append(c)
            _push_min(self._tmin, t)
            _push_min(self._cmin, c)

    def _forget_oldest(self, n: int) -> None:
        """Make the ``n``-th oldest live item the newest known dead one; forget those ``n``."""
        self.floor = self.seqs[n - 1]
        del self.seqs[:n], self.ts[:n], self._cs[:n], self._tmin[:n], self._cmin[:n]

    def _reset_to(self, seq: int) -> None:
        """Make ``seq`` the newest item known dead for good; forget every live item."""
        self.floor = seq
        self.seqs, self.ts, self._cs, self._tmin, self._cmin = [], [], [], [], []


async def newest_dead_by_scan(
    inner: Any, dead: Callable[[Any, float], bool], now: float, *, keep_live: bool = True
) -> tuple[int, list[tuple[int, Any]]]:
    """Walk ``inner``'s items from the newest back, a page at a time, to the first one for
    which ``dead(envelope, newer_t)`` holds; return its sequence number (0: none) and the live
    rows after it, oldest first (none unless ``keep_live``). Only an empty page ends the walk:
    a page may come back short while older items exist (the inner leaves undecodable or
    unreadable items out of reads)."""
    live: list[tuple[int, Any]] = []
    newer_t, before = now, None
    while True:
        rows = await inner.get_sequenced_items(_PAGE, before=before)
        if not rows:
            live.reverse()
            return 0, live
        for seq, envelope in reversed(rows):
            if dead(envelope, newer_t):
                live.reverse()
                return seq, live
            if keep_live:
                live.append((seq, envelope))
            newer_t = envelope["t"]
        before = rows[0][0]


def _push_min(mins: list[float], value: float) -> None:
    """Append ``value`` to a suffix-minimum list (each entry: the least value from there on)."""
    i = len(mins) - 1
    while i >= 0 and mins[i] > value:
        mins[i] = value
        i -= 1
    mins.append(value)


def _suffix_min(values: list[float]) -> list[float]:
    return list(accumulate(reversed(values), min))[::-1]
