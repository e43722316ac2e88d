"""Side storage for the branching and usage layers: the inner session's family, ranged reads.

Everything lives in the inner session's own backend: the ``main`` storage is the inner session
itself, other storages are side stores of its family (``core.family``) or come from a caller's
``sibling_factory``. Every storage has sequence numbers: a foreign session enters through
``ForeignSession`` (see ``foreign.sequenced``), so reads cost O(result) on this package's
backends.
"""

from __future__ import annotations

from typing import Any

from agents.memory import Session

from ...core.capabilities import Capability, SupportsSequencedItems, supports
from ...core.family import close_quietly, side_store
from ...core.ids import derive_sibling_id
from ..foreign import SiblingFactory, sequenced

MAIN = "main"
"""The storage key of the inner session itself."""


def open_storages(
    inner: Session, sibling_factory: SiblingFactory | None, wrapper: str
) -> Storages:
    """Return the storages of a layer over ``inner`` (a foreign ``inner`` is numbered by
    ``ForeignSession``), or raise TypeError naming the fix."""
    if sibling_factory is not None and not callable(sibling_factory):
        raise TypeError(f"{wrapper}: sibling_factory must be callable, got {sibling_factory!r}")
    main = sequenced(inner, sibling_factory, wrapper=wrapper)
    if sibling_factory is None and not supports(main, Capability.FAMILY):
        raise TypeError(
            f"{wrapper} keeps its side data in the same store as the inner session, but a "
            f"{type(inner).__name__} cannot open sibling sessions; pass sibling_factory=, "
            "e.g. sibling_factory=lambda sid: SQLiteSession(sid, db_path)"
        )
    return Storages(main, sibling_factory)


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


close_session = close_quietly


class Storages:
    """Opens and remembers the sessions that hold one conversation's data; each of them has
    sequence numbers."""

    def __init__(self, inner: Session, sibling_factory: SiblingFactory | None) -> None:
        self.inner = inner
        self._factory = sibling_factory
        self._open: dict[str, Session] = {}

    def side(self, purpose: str) -> Session:
        """Return the side store for ``purpose`` (e.g. ``"branches"``): from the inner
        session's family, or from the caller's ``sibling_factory`` when one was given."""
        key = "\x00" + purpose
        session = self._open.get(key)
        if session is None:
            if self._factory is None:
                session = side_store(self.inner, purpose)
            else:
                sid = derive_sibling_id(self.inner.session_id, purpose)
                session = sequenced(self._factory(sid), self._factory)
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
