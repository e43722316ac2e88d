"""``commit(ops, expect)``: several writes over sessions of one store as one atomic step,
made only while each expected session's newest number still holds (COMMIT).

A layer that keeps a view of one session while writing another (branching's log and storages,
compaction's records) guards the write with ``expect`` instead of reading, checking and
retrying: a :class:`~agent_sessions.errors.CommitConflictError` means "read again", never
"write anyway". Where no store makes the step atomic (sessions of different stores, a foreign
session, MongoDB without transactions) :func:`commit_by_api` is the one fallback: it checks
the expectations, then writes, in separate steps."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..errors import CommitConflictError
from .capabilities import Capability, supports

if TYPE_CHECKING:
    from agents.memory import Session

    from .capabilities import SupportsCheckedPop


@dataclass(frozen=True)
class Append:
    """Append ``items`` to ``session`` as one batch; its result is their numbers."""

    session: Session
    items: list[Any]


@dataclass(frozen=True)
class Pop:
    """Remove the newest item of ``session``; its result is the item (None: empty)."""

    session: Session


Op = Append | Pop
Expect = Sequence[tuple["Session", "int | None"]]
"""``(session, seq)``: the session's newest number must be ``seq`` (None: it holds none)."""


async def commit(ops: Sequence[Op], expect: Expect = ()) -> list[Any]:
    """Run ``ops`` in order as one atomic step while every expectation holds; return each
    op's result. Atomic where the first op's session declares COMMIT and every session is of
    its store; otherwise :func:`commit_by_api`.

    Raises:
        CommitConflictError: an expectation did not hold; nothing was written.
        InvalidItemError: an item is not a JSON object or is too large (nothing written).
    """
    if not ops:
        return []
    head: Any = ops[0].session
    if supports(head, Capability.COMMIT):
        return await head.commit(ops, expect)  # type: ignore[no-any-return]
    return await commit_by_api(ops, expect)


async def commit_by_api(ops: Sequence[Op], expect: Expect = ()) -> list[Any]:
    """``commit`` in steps, for sessions no store writes together: read each expected
    session's newest item (CommitConflictError when its number is not the one expected),
    then run the ops in order; a pop of an expected session removes only the item read there
    (a checked pop; CommitConflictError, with the ops before it written, when it moved).
    Another writer may act between the steps: the guard narrows races, it does not close them."""
    seen: dict[int, Any] = {}
    for session, seq in expect:
        reader: Any = session
        rows = await reader.get_sequenced_items(1)
        if (rows[-1][0] if rows else None) != seq:
            raise CommitConflictError(f"session {session.session_id!r} moved past {seq}")
        seen[id(session)] = rows[-1][1] if rows else None
    out: list[Any] = []
    for op in ops:
        target: Any = op.session
        if isinstance(op, Append):
            out.append(await target.add_sequenced_items(op.items))
        elif id(target) in seen and seen[id(target)] is not None:
            done, item = await pop_if_newest_is(target, seen[id(target)])
            if not done:
                raise CommitConflictError(f"session {target.session_id!r} moved")
            out.append(item)
        else:
            out.append(await target.pop_item())
    return out


async def pop_checked_of(session: Session, check: Callable[[Any], Any]) -> Any:
    """``session.pop_checked(check)``, or :func:`pop_checked_by_api` without CHECKED_POP."""
    if supports(session, Capability.CHECKED_POP):
        return await cast("SupportsCheckedPop", session).pop_checked(check)
    return await pop_checked_by_api(session, check)


class _Moved(Exception):
    """The newest item is not the one a pop read: another object popped meanwhile."""


def _same(expected: Any, item: Any) -> Any:
    if item != expected:
        raise _Moved
    return item


async def pop_if_newest_is(session: Session, item: Any) -> tuple[bool, Any]:
    """Pop ``session``'s newest item only if it is still ``item`` (a checked pop):
    ``(True, popped or None)``, or ``(False, None)`` when another item is newest now."""
    try:
        popped = await pop_checked_of(session, functools.partial(_same, item))
    except _Moved:
        return False, None
    return True, popped


async def pop_checked_by_api(session: Any, check: Callable[[Any], Any]) -> Any:
    """``pop_checked`` in two steps (read and check the newest, pop); an item that replaced
    it meanwhile is checked after its removal and added back when that check raises."""
    while True:
        newest = await session.get_items(limit=1)
        if not newest:
            return None
        result = check(newest[-1])  # raises: nothing was removed
        popped = await session.pop_item()
        if popped is None:
            continue  # emptied meanwhile
        if popped == newest[-1]:
            return result
        try:  # another writer's item replaced the checked one
            return check(popped)
        except Exception:
            await session.add_items([popped])
            raise


async def append_if_newest_of(
    session: Session, guard: Session, seq: int | None, items: list[Any]
) -> list[int] | None:
    """Append ``items`` to ``session`` only while ``guard``'s newest number is ``seq``, in one
    step (its ``append_if_newest`` where it declares GUARDED_WRITE, else :func:`commit`): the
    numbers, or None when the guard moved (read again; nothing was written)."""
    if supports(session, Capability.GUARDED_WRITE):
        return await session.append_if_newest(guard, seq, items)  # type: ignore[attr-defined,no-any-return]
    try:
        (numbers,) = await commit([Append(session, items)], [(guard, seq)])
    except CommitConflictError:
        return None
    return numbers  # type: ignore[no-any-return]


async def pop_if_newest_of(
    session: Session, guard: Session, seq: int | None, *, newest: int | None = None
) -> tuple[bool, Any]:
    """Pop ``session``'s newest item only while ``guard``'s newest number is ``seq`` and (when
    given) its own is ``newest``, in one step (``pop_if_newest`` where it declares
    GUARDED_WRITE, else :func:`commit`): ``(True, item or None)``, or ``(False, None)`` when
    a number moved (read again; nothing was popped)."""
    if supports(session, Capability.GUARDED_WRITE):
        return await session.pop_if_newest(guard, seq, newest=newest)  # type: ignore[attr-defined,no-any-return]
    expect = [(guard, seq), *([(session, newest)] if newest is not None else [])]
    try:
        (item,) = await commit([Pop(session)], expect)
    except CommitConflictError:
        return False, None
    return True, item


async def commit_below(
    ops: Sequence[Op],
    expect: Expect,
    layer: type,
    down: Callable[[Any, list[Any]], Awaitable[list[Any]]],
    up: Callable[[Any, Any], Any],
) -> list[Any]:
    """``commit`` through a layer that keeps its inner session's numbers: each op's session
    (all of type ``layer``, else :func:`commit_by_api`) replaced by its ``inner``, appended
    items by ``await down(session, items)``, popped ones by ``up(session, stored)``; expected
    sessions of ``layer`` by their inner ones."""
    if not all(isinstance(op.session, layer) for op in ops):
        return await commit_by_api(ops, expect)
    below: list[Op] = []
    for op in ops:
        inner: Any = op.session.inner  # type: ignore[attr-defined]
        if isinstance(op, Append):
            below.append(Append(inner, await down(op.session, op.items)))
        else:
            below.append(Pop(inner))
    guards = [(g.inner if isinstance(g, layer) else g, seq) for g, seq in expect]  # type: ignore[attr-defined]
    done = await commit(below, guards)
    return [
        r if isinstance(op, Append) or r is None else up(op.session, r)
        for op, r in zip(ops, done, strict=True)
    ]


__all__ = [
    "Append",
    "Expect",
    "Op",
    "Pop",
    "commit",
    "commit_below",
    "commit_by_api",
    "append_if_newest_of",
    "pop_checked_by_api",
    "pop_checked_of",
    "pop_if_newest_is",
    "pop_if_newest_of",
]
