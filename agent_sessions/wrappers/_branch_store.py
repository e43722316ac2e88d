"""Side storage for the branching and usage layers: siblings of the inner session, ranged reads.

Everything lives in the inner session's own backend: the ``main`` storage is the inner session
itself, other storages are its siblings (``SupportsSiblings``) or come from a caller's
``sibling_factory``. Every storage has sequence numbers: a foreign session enters through
``ForeignSession`` (see ``foreign.sequenced``), so reads cost O(result) on this package's
backends.
"""

from __future__ import annotations

import inspect
from typing import Any

from agents.memory import Session

from ..core.capabilities import SupportsSequencedItems, SupportsSiblings
from ..core.ids import derive_sibling_id
from .foreign import SiblingFactory, sequenced

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
    if sibling_factory is None:
        if not isinstance(main, SupportsSiblings):
            raise TypeError(
                f"{wrapper} keeps its side data in the same store as the inner session, but a "
                f"{type(inner).__name__} cannot open sibling sessions; pass sibling_factory=, "
                "e.g. sibling_factory=lambda sid: SQLiteSession(sid, db_path)"
            )
        sibling_factory = main.sibling
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


async def close_session(session: Session) -> None:
    """Close ``session`` if it can be closed (sync or async ``close``)."""
    close = getattr(session, "close", None)
    if close is not None:
        result = close()
        if inspect.isawaitable(result):
            await result


class Storages:
    """Opens and remembers the sessions that hold one conversation's data; each of them has
    sequence numbers."""

    def __init__(self, inner: Session, sibling_factory: SiblingFactory) -> None:
        self.inner = inner
        self._factory = sibling_factory
        self._open: dict[str, Session] = {}

    def side(self, purpose: str) -> Session:
        """Return the sibling session for ``purpose`` (e.g. ``"branches"``)."""
        key = "\x00" + purpose
        session = self._open.get(key)
        if session is None:
            session = self._open[key] = self.open_sibling(
                derive_sibling_id(self.inner.session_id, purpose)
            )
        return session

    def open_sibling(self, session_id: str) -> Session:
        """Open a session of the same store for ``session_id`` (the caller closes it)."""
        return sequenced(self._factory(session_id), self._factory)

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
