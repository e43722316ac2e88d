"""Optional capabilities a session may offer beyond the SDK's four methods.

Wrappers detect them with ``isinstance`` and fall back to the plain Session API when absent, so
they work over any Session, including the SDK's own classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, _ProtocolMeta, runtime_checkable

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session


class _CapabilityMeta(_ProtocolMeta):
    """``isinstance`` against a capability: every method of it is present (not None) on the
    object, as ``runtime_checkable`` checks, minus Python 3.11's recomputation of the
    protocol's members on each check (20-40 µs; a wrapper stack checks several per object)."""

    def __instancecheck__(cls, instance: object) -> bool:
        members = _MEMBERS.get(cls)
        if members is None:
            members = _MEMBERS[cls] = tuple(
                name for name, value in vars(cls).items()
                if callable(value) and not name.startswith("_")
            )  # fmt: skip
        return all(getattr(instance, name, None) is not None for name in members)


_MEMBERS: dict[type, tuple[str, ...]] = {}


@runtime_checkable
class SupportsSiblings(Protocol, metaclass=_CapabilityMeta):
    """Opens other sessions of the same store, sharing this one's connection or pool."""

    def sibling(self, session_id: str) -> Session:
        """Return a session of the same backend for ``session_id``.

        ``session_id`` may be a derived id (see ``agent_sessions.core.ids.derive_sibling_id``).
        Closing a sibling never closes the shared connection while others use it.
        """
        ...


@runtime_checkable
class SupportsSequencedItems(Protocol, metaclass=_CapabilityMeta):
    """Exposes each item's sequence number: unique per session, increasing in commit order.

    A sequence number is never reused within a session, even after ``pop_item``; only
    ``clear_session`` may restart numbering. Reads cost O(result), not O(history).
    """

    async def add_sequenced_items(self, items: list[TResponseInputItem]) -> list[int]:
        """Append ``items`` as one all-or-nothing batch; return their sequence numbers."""
        ...

    async def get_sequenced_items(
        self,
        limit: int | None = None,
        *,
        after: int | None = None,
        before: int | None = None,
    ) -> list[tuple[int, TResponseInputItem]]:
        """Return ``(seq, item)`` pairs with ``after < seq < before``, the latest ``limit``
        of them (all when None), in chronological order."""
        ...

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        """Return how many items have ``after < seq < before``."""
        ...


@runtime_checkable
class SupportsRangeDelete(Protocol, metaclass=_CapabilityMeta):
    """Deletes the oldest items of a session in one atomic step (used to purge expired data).

    Offered together with :class:`SupportsSequencedItems`, whose sequence numbers it takes. A
    backend offering it must never reuse a session's sequence numbers, not even after
    ``clear_session``: a purge that read number N before a concurrent clear would otherwise
    delete the items written after the clear.
    """

    async def delete_items(self, *, before: int) -> int:
        """Atomically delete every item with a sequence number below ``before``; return how
        many were deleted. Items written concurrently (higher numbers) are never touched."""
        ...


@runtime_checkable
class SupportsNativeExpiry(Protocol, metaclass=_CapabilityMeta):
    """Expires a whole session natively (Redis EXPIRE, a MongoDB TTL index)."""

    def set_sliding_ttl(self, ttl_seconds: float | None) -> None:
        """From now on, make every write set all of this session's stored data (items and
        bookkeeping) to expire ``ttl_seconds`` after that write, in the same round trip.
        ``None`` stops setting expiry. Takes effect at the next write."""
        ...
