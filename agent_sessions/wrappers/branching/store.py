"""The storages of a branching or usage layer: ``main`` is the inner session, the others are side
stores of its family; all have sequence numbers, so ranged reads cost O(result)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agents.memory import Session

from ...core.capabilities import (
    Capability,
    Read,
    SupportsFamilyBatch,
    SupportsSequencedItems,
    supports,
)

MAIN = "main"
"""The storage key of the inner session itself."""


async def read_rows(
    session: Session,
    limit: int | None = None,
    *,
    after: int | None = None,
    before: int | None = None,
) -> list[tuple[int, Any]]:
    """Return ``(seq, item)`` with after < seq < before, the latest ``limit``, oldest first."""
    if limit is not None and limit <= 0:
        return []
    seq_session: SupportsSequencedItems = session  # type: ignore[assignment]
    return await seq_session.get_sequenced_items(limit, after=after, before=before)


async def newest_first(
    session: Session, page: int, cap: int, before: int | None = None
) -> AsyncIterator[tuple[int, Any]]:
    """``(seq, item)`` below ``before``, newest first, read in pages growing up to ``cap``."""
    while True:
        rows = await read_rows(session, page, before=before)
        for row in reversed(rows):
            yield row
        if len(rows) < page:
            return
        page, before = min(page * 4, cap), rows[0][0]


async def first_visible(session: Session, seq_at: Callable[[int], Awaitable[int]], n: int) -> int:
    """How many of the ``n`` oldest known items (``seq_at(k)`` is the k-th one's number) are
    no longer in ``session``. Expiry hides a prefix by sequence number, so a binary search
    finds the first visible one, each probe a one-row read; none expired costs one read."""

    async def visible(k: int) -> bool:
        seq = await seq_at(k)
        rows = await read_rows(session, 1, before=seq + 1)
        return bool(rows) and rows[0][0] == seq

    if n == 0 or await visible(0):
        return 0
    lo, hi = 1, n
    while lo < hi:
        mid = (lo + hi) // 2
        if await visible(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


async def read_family(reads: list[Read]) -> list[list[tuple[int, Any]]]:
    """:func:`read_rows` for each read, in order: through the first session's
    ``get_sequenced_family`` where it declares FAMILY_BATCH (one round trip for the sessions
    sharing its store), else concurrently."""
    first = reads[0][0]
    if supports(first, Capability.FAMILY_BATCH):
        family: SupportsFamilyBatch = first  # type: ignore[assignment]
        return await family.get_sequenced_family(reads)
    return list(
        await asyncio.gather(
            *(read_rows(s, limit, after=after, before=before) for s, limit, after, before in reads)
        )
    )


class Storages:
    """The sessions that hold one conversation's data, each with sequence numbers: ``main``
    is the inner session, others are side stores of its family (opened by ``side``, a method
    of the layer that owns this, held weakly: no reference cycle keeps a layer used once)."""

    def __init__(self, inner: Session, side: Callable[[str], Session]) -> None:
        self.inner = inner
        self._side = weakref.WeakMethod(side)  # type: ignore[arg-type]

    def side(self, name: str) -> Session:
        """The side store ``name`` of the owner's family."""
        return self._side()(name)  # type: ignore[misc]

    def storage(self, key: str) -> Session:
        """Return the session holding the items of storage ``key``."""
        return self.inner if key == MAIN else self.side(f"seg.{key}")
