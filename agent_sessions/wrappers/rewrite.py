"""Rewriting a session's whole history through the plain Session API, crash- and cancel-safe.

Used by ``EncryptedSession.rotate()``; other layers that must rewrite history (compaction) can
use it too. Layers keep their per-item metadata by implementing ``SessionWrapper.rewrite_items``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from typing import Any

from agents.memory import Session

from ..core.capabilities import SupportsSiblings
from ..core.ids import derive_sibling_id
from ..core.mutation import run_to_completion
from .base import SessionWrapper

Transform = Callable[[list[Any]], list[Any]]
"""Maps a session's whole item list to a list of the same length: the item to store in each
position, or None to delete that item. Layers keep their per-item metadata by position."""

ALL_ITEMS = 2**62
"""A limit larger than any session, used to read everything whatever the settings say."""


async def read_all(session: Session) -> list[Any]:
    """Return every item of ``session``, whatever its ``session_settings.limit`` says."""
    settings = getattr(session, "session_settings", None)
    if settings is None or settings.limit is None:
        return list(await session.get_items())
    return list(await session.get_items(limit=ALL_ITEMS))


async def rewrite_session(session: Session, transform: Transform, *, attempts: int = 3) -> int:
    """Replace every stored item of ``session`` by ``transform(items)`` (None deletes),
    keeping order; returns how many items the session holds afterwards.

    Uses only the Session API. When ``session`` offers siblings, the new list is first written
    to a side session (``derive_sibling_id(id, "rewrite")``) and a swap mark (with a
    fingerprint of the current items) is added to it before the session is cleared, so a
    process dying anywhere leaves either the untouched session, the finished one, or an empty
    one plus a full copy that the next call puts back. A cancelled caller waits for a started
    swap to finish. The stored
    items are read again just before the swap and the rewrite restarts (up to ``attempts``
    times) when they changed; a write landing in the short window between that check and the
    clear is still lost, so run rewrites while the session is idle.

    Raises:
        RuntimeError: the session kept changing, or an earlier rewrite died mid-swap and the
            session has received new items since (the copy is left in the side session).
    """
    if not isinstance(session, SupportsSiblings):
        return await _swap(session, transform, None, attempts)
    backup = session.sibling(derive_sibling_id(session.session_id, "rewrite"))
    try:
        await _recover(session, backup)
        return await _swap(session, transform, backup, attempts)
    finally:
        close = getattr(backup, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result


_MARK_TYPE = "agent_sessions.rewrite"


def _digest(items: list[Any]) -> str:
    """A fingerprint of an item list that ignores key order (stores may reorder keys)."""
    text = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


async def _recover(session: Session, backup: Session) -> None:
    leftover = await read_all(backup)
    if not leftover:
        return
    mark = leftover[-1]
    if isinstance(mark, dict) and mark.get("type") == _MARK_TYPE:  # died during its swap
        copy = leftover[:-1]
        current = await read_all(session)
        if not current:
            await session.add_items(copy)  # died between the clear and the add
        elif current[: len(copy)] != copy and _digest(current[: mark["count"]]) != mark["before"]:
            raise RuntimeError(
                f"an earlier rewrite of session {session.session_id!r} died after clearing it, "
                "and new items were added since; its previous items are kept in the side "
                f"session {backup.session_id!r}: move them back by hand, then clear that one"
            )
        # else: the swap had finished, or the session was never cleared
    await backup.clear_session()  # without a mark, the session itself was never touched


async def _swap(
    session: Session, transform: Transform, backup: Session | None, attempts: int
) -> int:
    for _ in range(attempts):
        items = await read_all(session)
        new = [item for item in transform(list(items)) if item is not None]
        if new == items:
            return len(items)
        if backup is not None:
            await backup.add_items(new)
        if await read_all(session) != items:
            if backup is not None:
                await backup.clear_session()
            continue
        # A cancelled caller waits for the swap to finish rather than leave the session empty.
        await run_to_completion(_swap_now(session, items, new, backup))
        return len(new)
    raise RuntimeError(
        f"session {session.session_id!r} kept changing during the rewrite; retry while it is "
        "idle"
    )


async def _swap_now(
    session: Session, items: list[Any], new: list[Any], backup: Session | None
) -> None:
    if backup is not None:
        mark: Any = {"type": _MARK_TYPE, "count": len(items), "before": _digest(items)}
        await backup.add_items([mark])
    await session.clear_session()
    await session.add_items(new)
    if backup is not None:
        await backup.clear_session()


async def rewrite_through(session: Session, transform: Transform) -> int:
    """Rewrite ``session``'s items as it exposes them: through its own ``rewrite_items`` when
    it is a wrapper (which keeps its own metadata), else with :func:`rewrite_session`."""
    if isinstance(session, SessionWrapper):
        return await session.rewrite_items(transform)
    return await rewrite_session(session, transform)


__all__ = ["ALL_ITEMS", "Transform", "read_all", "rewrite_session", "rewrite_through"]
