"""Side storage for the branching and usage layers: siblings of the inner session, ranged reads.

Everything lives in the inner session's own backend: the ``main`` storage is the inner session
itself, other storages are its siblings (``SupportsSiblings``) or come from a caller's
``sibling_factory``. Reads use sequence numbers (``SupportsSequencedItems``) when the session
offers them, so they cost O(result); otherwise positions in a full read stand in for them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from agents.memory import Session

from ..core.base import BaseSession
from ..core.capabilities import SupportsSequencedItems, SupportsSiblings
from ..core.codec import encode_batch
from ..core.ids import derive_sibling_id

SiblingFactory = Callable[[str], Session]
"""Makes a session of the same store for a derived id (for inner sessions without siblings)."""

_EVERYTHING = 2**62
"""A limit larger than any history, for full reads of sessions that apply a default limit."""

MAIN = "main"
"""The storage key of the inner session itself."""


def resolve_sibling_factory(
    inner: Session, sibling_factory: SiblingFactory | None, wrapper: str
) -> SiblingFactory:
    """Return how to open siblings of ``inner``, or raise TypeError naming the fix."""
    if sibling_factory is not None:
        if not callable(sibling_factory):
            raise TypeError(f"{wrapper}: sibling_factory must be callable, got {sibling_factory!r}")
        return sibling_factory
    if isinstance(inner, SupportsSiblings):
        return inner.sibling
    raise TypeError(
        f"{wrapper} keeps its side data in the same store as the inner session, but a "
        f"{type(inner).__name__} cannot open sibling sessions; pass sibling_factory=, e.g. "
        "sibling_factory=lambda sid: SQLiteSession(sid, db_path)"
    )


def is_sequenced(session: Session) -> bool:
    """Whether ``session`` offers sequence numbers. Our backends always do; wrappers do per
    instance (when their inner does), so they are checked each time."""
    if isinstance(session, BaseSession):
        return True
    # The three methods of SupportsSequencedItems; a runtime protocol check costs ~8 us. Each
    # must be the session's own: a proxy that forwards unknown attributes (the SDK's
    # EncryptedSession) would otherwise hand out its inner session's rows, untransformed.
    return all(
        getattr(getattr(session, name, None), "__self__", None) is session
        for name in ("add_sequenced_items", "get_sequenced_items", "count_items")
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
    if is_sequenced(session):
        seq_session: SupportsSequencedItems = session  # type: ignore[assignment]
        return await seq_session.get_sequenced_items(limit, after=after, before=before)
    items = await session.get_items(_EVERYTHING)
    lo = 0 if after is None else max(0, after)
    hi = len(items) if before is None else min(len(items), before - 1)
    rows = [(i + 1, items[i]) for i in range(lo, max(lo, hi))]
    return rows if limit is None else rows[-limit:]


async def close_session(session: Session) -> None:
    """Close ``session`` if it can be closed (sync or async ``close``)."""
    close = getattr(session, "close", None)
    if close is not None:
        result = close()
        if inspect.isawaitable(result):
            await result


class Storages:
    """Opens and remembers the sessions that hold one conversation's data."""

    def __init__(self, inner: Session, sibling_factory: SiblingFactory) -> None:
        self.inner = inner
        self._factory = sibling_factory
        self._open: dict[str, Session] = {}

    def side(self, purpose: str) -> Session:
        """Return the sibling session for ``purpose`` (e.g. ``"branches"``)."""
        key = "\x00" + purpose
        session = self._open.get(key)
        if session is None:
            session = self._open[key] = self._factory(
                derive_sibling_id(self.inner.session_id, purpose)
            )
        return session

    def open_sibling(self, session_id: str) -> Session:
        """Open a session of the same store for ``session_id`` (the caller closes it)."""
        return self._factory(session_id)

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
