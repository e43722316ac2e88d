"""Side storage for the branching and usage layers: the inner session's family, ranged reads.

Everything lives in the inner session's own backend: the ``main`` storage is the inner session
itself, other storages are side stores of its family (``core.family``) or come from a caller's
``sibling_factory``. Reads use sequence numbers (``Capability.SEQUENCED``) when the session
declares them, so they cost O(result); otherwise positions in a full read stand in for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.memory import Session

from ..core.base import BaseSession
from ..core.capabilities import Capability, SupportsSequencedItems, supports
from ..core.codec import encode_batch
from ..core.family import close_quietly, side_store
from ..core.ids import derive_sibling_id

SiblingFactory = Callable[[str], Session]
"""Makes a session of the same store for a derived id (for inner sessions without siblings)."""

_EVERYTHING = 2**62
"""A limit larger than any history, for full reads of sessions that apply a default limit."""

MAIN = "main"
"""The storage key of the inner session itself."""


def resolve_sibling_factory(
    inner: Session, sibling_factory: SiblingFactory | None, wrapper: str
) -> SiblingFactory | None:
    """Return the caller's factory for side stores, None when ``inner``'s family provides
    them, or raise TypeError naming the fix."""
    if sibling_factory is not None:
        if not callable(sibling_factory):
            raise TypeError(f"{wrapper}: sibling_factory must be callable, got {sibling_factory!r}")
        return sibling_factory
    if supports(inner, Capability.FAMILY):
        return None
    raise TypeError(
        f"{wrapper} keeps its side data in the same store as the inner session, but a "
        f"{type(inner).__name__} cannot open sibling sessions; pass sibling_factory=, e.g. "
        "sibling_factory=lambda sid: SQLiteSession(sid, db_path)"
    )


def check_items(session: Session, items: Any) -> None:
    """Validate a batch for a session of another package (ours validate on their own).

    Raises:
        InvalidItemError: an item is not a JSON object or too large; nothing is written.
    """
    if not isinstance(session, BaseSession):
        encode_batch(items)


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
    if supports(session, Capability.SEQUENCED):
        seq_session: SupportsSequencedItems = session  # type: ignore[assignment]
        return await seq_session.get_sequenced_items(limit, after=after, before=before)
    items = await session.get_items(_EVERYTHING)
    lo = 0 if after is None else max(0, after)
    hi = len(items) if before is None else min(len(items), before - 1)
    rows = [(i + 1, items[i]) for i in range(lo, max(lo, hi))]
    return rows if limit is None else rows[-limit:]


close_session = close_quietly


class Storages:
    """Opens and remembers the sessions that hold one conversation's data."""

    def __init__(self, inner: Session, sibling_factory: SiblingFactory | None) -> None:
        self.inner = inner
        self._factory = sibling_factory
        self._open: dict[str, Session] = {}

    def side(self, purpose: str) -> Session:
        """Return the side store for ``purpose`` (e.g. ``"branches"``)."""
        key = "\x00" + purpose
        session = self._open.get(key)
        if session is None:
            if self._factory is None:
                session = side_store(self.inner, purpose)
            else:
                session = self._factory(derive_sibling_id(self.inner.session_id, purpose))
            self._open[key] = session
        return session

    def storage(self, key: str) -> Session:
        """Return the session holding the items of storage ``key``."""
        if key == MAIN:
            return self.inner
        return self.side(f"seg.{key}")

    async def close(self) -> None:
        """Close every sibling opened here (not the inner session)."""
        opened, self._open = list(self._open.values()), {}
        for session in opened:
            await close_session(session)
