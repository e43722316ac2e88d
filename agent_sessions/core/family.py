"""The session family: a user's session plus the side stores layers keep for it (same
connection, a derived id, default settings, closed with their opener). The family's registry
(itself a side store) lists every side store ever written, so erase and key rotation reach
them all."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, cast

from .capabilities import Capability, SupportsFamily, supports

if TYPE_CHECKING:
    from agents.memory import Session

REGISTRY = "family"
"""The purpose of the side store that lists a family's members."""


def side_store(session: Session, purpose: str) -> Session:
    """Return the side store for ``purpose`` (e.g. ``"branches"``) in ``session``'s family.

    Raises:
        TypeError: ``session`` keeps no family (a session from outside this package).
    """
    if not supports(session, Capability.FAMILY):
        raise TypeError(
            f"{type(session).__name__} cannot keep side data (it declares no "
            "Capability.FAMILY); wrap one of agent_sessions' backends, or pass "
            "sibling_factory= to the layer"
        )
    return cast("SupportsFamily", session).side_store(purpose)


async def member_purposes(session: Session) -> list[str]:
    """Return the purposes of every side store ever written in ``session``'s family (by any
    object or process), oldest first; ``[]`` for a session without a family."""
    if not supports(session, Capability.FAMILY):
        return []
    return cast("list[str]", await session.family_purposes())  # type: ignore[attr-defined]


async def close_quietly(session: Session) -> None:
    """Close ``session`` if it can be closed (sync or async ``close``)."""
    close = getattr(session, "close", None)
    if close is not None:
        result = close()
        if inspect.isawaitable(result):
            await result


async def close_owned(session: Session) -> None:
    """Close ``session`` from its owner's release: this package's sessions release in the
    calling task instead of starting their own."""
    inline = getattr(session, "_close_owned", None)
    await (close_quietly(session) if inline is None else inline())


def close_at_once(session: Session) -> bool:
    """Close ``session`` now if that needs no I/O; True when closed so (else ``close()`` or
    :func:`close_owned` does the rest)."""
    hook = getattr(session, "_close_at_once", None)
    return hook is not None and bool(hook())


def purposes_in(records: list[Any]) -> list[str]:
    """The distinct purposes named by registry ``records``, in first-seen order."""
    seen: dict[str, None] = {}
    for record in records:
        purpose = record.get("purpose") if isinstance(record, dict) else None
        if isinstance(purpose, str) and purpose != REGISTRY:
            seen.setdefault(purpose, None)
    return list(seen)


class SharedMembers:
    """The side stores of one store's families, opened once and shared by every session object
    of that store in this process (a fresh object per request then opens none). A shared member
    holds no share of the store, ignores ``close()`` and is dropped with the store; which of
    them are listed in their registry is thus known process-wide. Least recently used first out
    past ``limit``. Thread-safe: a store's sessions may run on several threads' loops."""

    def __init__(self, limit: int = 1024) -> None:
        self._members: dict[Hashable, Any] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._members)

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The member stored under ``key`` (made most recently used), else ``make()`` stored
        there, dropping the least recently used past the limit."""
        with self._lock:
            found = self._members.pop(key, None)
            if found is None:
                found = make()
            self._members[key] = found
            if len(self._members) > self._limit:
                del self._members[next(iter(self._members))]
            return found


class Family:
    """The side stores one session object opened, by purpose; closed with that object. A
    closed member is opened again (``open_member``) on the next request. It keeps no reference
    to its owner, so an owner used once (a fresh object per request) is freed as soon as it is
    dropped, not by the cycle collector."""

    def __init__(self, purpose: str = "", opened: Session | None = None) -> None:
        """``opened``: the member for ``purpose``, already opened by the caller."""
        self._members: dict[str, Session] = {} if opened is None else {purpose: opened}

    def member(self, purpose: str, open_member: Callable[[str], Session]) -> Session:
        """Return the open member for ``purpose``, opening it with ``open_member`` if
        needed."""
        found = self._members.get(purpose)
        if found is None or getattr(found, "closed", False):
            found = self._members[purpose] = open_member(purpose)
        return found

    def opened(self) -> list[Session]:
        """The members this object has open."""
        return [m for m in self._members.values() if not getattr(m, "closed", False)]

    def close_at_once(self) -> bool:
        """Close the members that ``close_at_once`` can; True when none is left open."""
        for purpose, member in list(self._members.items()):
            if close_at_once(member):
                del self._members[purpose]
        return not self._members

    async def close(self) -> None:
        """Close every member this object opened (from the owner's release)."""
        members, self._members = list(self._members.values()), {}
        for member in members:
            await close_owned(member)


__all__ = [
    "REGISTRY",
    "Family",
    "SharedMembers",
    "close_at_once",
    "close_owned",
    "close_quietly",
    "member_purposes",
    "purposes_in",
    "side_store",
]
