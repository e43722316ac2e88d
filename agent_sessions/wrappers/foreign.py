"""``ForeignSession``: the one adapter that gives a session from outside sequence numbers.

Layers that keep pointers into a history address items by sequence number only; a foreign
session (the SDK's ``SQLiteSession``, a user's own Session) has only the four Session methods,
so it enters every such layer through this adapter. The numbering is a few *runs* (first
position, first number) kept in an append-only log in the side store ``seq``; each mutation
first appends the numbering before and after it with digests of the newest item, then changes
the foreign session. What is guaranteed and what it costs: docs/design.md, "Sequence numbers
are the only address".

A foreign session that keeps one history per run context (its methods take ``wrapper=``) is
passed through with the Runner's ``wrapper=``, unnumbered and declaring no capability: the
numbering is for the layers above that keep numbers, and each of them refuses a context-aware
session (their side data would be shared by the contexts).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.memory import Session

from ..core.capabilities import Capability, supports
from ..core.codec import encode_batch
from ..core.family import close_quietly
from ..core.ids import validate_session_id
from ..core.mutation import run_to_completion
from .base import ContextForwardingWrapper

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

SiblingFactory = Callable[[str], Session]
"""Opens a session of the same store for a derived id (for sessions without ``sibling()``)."""

NUMBERING_TYPE = "agent_sessions.numbering"
ALL_ITEMS = 2**62
"""A limit above any history: a full read whatever ``session_settings.limit`` says."""


def is_sequenced(session: Session) -> bool:
    """Whether ``session`` declares sequence numbers (``Capability.SEQUENCED``)."""
    return supports(session, Capability.SEQUENCED)


def expiring_layer(session: Session) -> object | None:
    """Return the first layer of ``session``'s stack (following ``.inner``) whose items vanish
    from reads on their own, or None: ours say so with ``expires_items``; the SDK's
    EncryptedSession always has a ttl (Fernet's, 600 s by default)."""
    try:
        from agents.extensions.memory.encrypt_session import EncryptedSession as SDKEncrypted
    except ImportError:  # pragma: no cover - the SDK's extra needs cryptography
        sdk_encrypted: tuple[type, ...] = ()
    else:
        sdk_encrypted = (SDKEncrypted,)
    for layer in layers(session):
        own = getattr(layer, "__dict__", {}).get("expires_items", False)  # set per instance
        if getattr(type(layer), "expires_items", False) or own or isinstance(layer, sdk_encrypted):
            return layer
    return None


def layers(session: Session) -> Iterator[object]:
    """``session`` and the layers under it, following ``.inner`` (each once)."""
    layer: object = session
    seen: set[int] = set()
    while layer is not None and id(layer) not in seen:
        yield layer
        seen.add(id(layer))
        layer = getattr(layer, "inner", None)


def sequenced(
    session: Session, sibling_factory: SiblingFactory | None = None, *, wrapper: str = "a layer"
) -> Session:
    """Return ``session`` when it offers sequence numbers, else ``ForeignSession`` over it.

    Raises:
        TypeError: ``session`` is foreign and no side store can be opened for its numbering.
        ValueError: ``session`` is foreign and its items expire on their own.
    """
    if is_sequenced(session):
        return session
    return ForeignSession(session, sibling_factory=sibling_factory, wrapper=wrapper)


def _digest(item: Any) -> str | None:
    if item is None:
        return None
    text = json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


@dataclass
class Numbering:
    """Sequence numbers of positions ``1..n``: ``runs`` of (first position, first number)."""

    n: int = 0
    high: int = 0
    runs: list[tuple[int, int]] = field(default_factory=list)

    def seq_at(self, position: int) -> int:
        first_pos, first_seq = self.runs[bisect_right(self.runs, (position, 2**63)) - 1]
        return first_seq + position - first_pos

    def below(self, bound: int) -> int:
        """How many items have a number below ``bound``."""
        ends = [pos for pos, _ in self.runs[1:]] + [self.n + 1]
        return sum(
            min(end - pos, bound - seq)
            for (pos, seq), end in zip(self.runs, ends, strict=False)
            if seq < bound
        )

    def added(self, k: int) -> list[int]:
        if k and not (self.n and self.seq_at(self.n) == self.high):
            self.runs.append((self.n + 1, self.high + 1))
        seqs = list(range(self.high + 1, self.high + k + 1))
        self.n += k
        self.high += k
        return seqs

    def truncated(self, n: int) -> Numbering:
        return Numbering(n, self.high, [run for run in self.runs if run[0] <= n])

    def renumbered(self, n: int) -> Numbering:
        """Every one of ``n`` items gets a fresh number."""
        return Numbering(n, self.high + n, [(1, self.high + 1)] if n else [])

    def copy(self) -> Numbering:
        return Numbering(self.n, self.high, list(self.runs))

    def to_json(self) -> list[Any]:
        return [self.n, self.high, [list(run) for run in self.runs]]

    @classmethod
    def from_json(cls, value: Any) -> Numbering:
        n, high, runs = value
        return cls(int(n), int(high), [(int(p), int(s)) for p, s in runs])


_Locks = weakref.WeakValueDictionary[tuple[str, ...], asyncio.Lock]
_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Locks] = weakref.WeakKeyDictionary()
"""Per loop, the lock of each session in use: an entry lives while an object holds its lock
(a server seeing many sessions does not keep one lock per id it ever saw)."""


def _store_key(session: Session, session_id: str) -> tuple[str, ...]:
    kind = type(session)
    where = getattr(session, "db_path", None) or getattr(
        getattr(session, "inner", None), "db_path", ""
    )
    return (f"{kind.__module__}.{kind.__qualname__}", str(where), session_id)


_PENDING = "\x1epending"
"""The stand-in id SessionWrapper sees for an inner session whose id comes later."""


def _has_id(session: Session) -> bool:
    try:
        session.session_id  # noqa: B018  (the SDK's OpenAIConversationsSession raises)
    except ValueError:
        return False
    return True


class _IdLater:
    """``inner`` with a stand-in id, for SessionWrapper's constructor only."""

    session_id = _PENDING

    def __init__(self, inner: Session) -> None:
        self.wrapped = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class ForeignSession(ContextForwardingWrapper):
    """A foreign session with sequence numbers (see the module docstring for the guarantees).

    Args:
        inner: any Session whose reads return every stored item (no expiry of its own). One
            that creates its id on first use (the SDK's ``OpenAIConversationsSession()``
            without ``conversation_id``) is accepted: this session's id is its id once the
            first operation here has created it, unless ``session_id`` is given.
        side_store_factory: opens a session of a store for a derived id; needed when
            ``inner`` cannot open side stores itself, e.g. ``lambda sid: SQLiteSession(sid,
            "chat.db")`` (this package's or the SDK's) or ``store.session``. It opens this
            session's numbering log and, for layers above, side stores (each of them wrapped
            in a ForeignSession in turn). ``sibling_factory`` is the old name.
        session_id: the id the numbering and side stores are kept under (default: the inner
            session's); for an inner whose id comes later or changes (the SDK's
            ``OpenAIConversationsSession`` starts a new conversation after a clear).

    Raises:
        TypeError: no side store can be opened (pass ``side_store_factory``).
        ValueError: ``inner``'s items expire on their own.
    """

    def __init__(
        self,
        inner: Session,
        *,
        side_store_factory: SiblingFactory | None = None,
        sibling_factory: SiblingFactory | None = None,
        session_id: str | None = None,
        wrapper: str = "ForeignSession",
    ) -> None:
        if side_store_factory is not None and sibling_factory is not None:
            raise TypeError("pass side_store_factory= or sibling_factory= (its old name), not both")
        sibling_factory = side_store_factory or sibling_factory
        self._id = None if session_id is None else validate_session_id(session_id)
        # SessionWrapper reads inner.session_id at construction; an id created on first use
        # raises there (the SDK's ValueError), so it sees a stand-in until then
        # (tests/test_foreign.py::test_a_conversation_created_on_first_use_is_numbered).
        named = inner if _has_id(inner) else _IdLater(inner)
        super().__init__(named, sibling_factory=sibling_factory)
        self.inner = inner
        self._opened_log: Session | None = None
        if self.context_aware:  # passed through, unnumbered (module docstring)
            return
        layer = expiring_layer(inner)
        if layer is not None:
            raise ValueError(
                f"{wrapper} over {inner!r} is not supported: that session has no sequence "
                f"numbers of its own, and the {type(layer).__name__} in it removes old items "
                "from reads as they expire, which shifts every position. Put the expiring "
                "layer over one of agent_sessions' backends, or over ForeignSession(session)"
            )
        if sibling_factory is None and not supports(inner, Capability.FAMILY):
            option = "side_store_factory" if wrapper == "ForeignSession" else "sibling_factory"
            raise TypeError(
                f"{wrapper} keeps side data (item numbering, branches, records) in a store, "
                f"but a {type(inner).__name__} cannot open other sessions; pass {option}=, "
                f'e.g. {option}=lambda sid: SQLiteSession(sid, "chat.db") (this package\'s '
                "sessions or the SDK's), or store.session for a store from "
                "agent_sessions.open_store"
            )
        self.capabilities = frozenset(
            {Capability.SEQUENCED, Capability.FAMILY, Capability.CHECKED_POP}
        )
        # Opened now when the id is known, so a factory that fails says so at construction.
        self._opened_log = None if self._id is None else self._plain_member("seq")
        self._key: tuple[str, ...] | None = None
        self._resolved: tuple[Any, Numbering] | None = None
        self._newest: str | None = None

    @property  # type: ignore[override]
    def session_id(self) -> str:
        """The id the numbering and side stores are kept under (see ``session_id=``)."""
        if self._id is None:
            try:
                self._id = self.inner.session_id  # pinned: a later change is the inner's own
            except ValueError as exc:
                raise ValueError(
                    f"{type(self.inner).__name__} has no id until its first operation; await "
                    "one operation on this ForeignSession first (e.g. get_items()), or pass "
                    "ForeignSession(..., session_id=...)"
                ) from exc
        return self._id

    @session_id.setter
    def session_id(self, value: str) -> None:
        if self._id is None and value is not _PENDING:
            self._id = value

    async def _started(self) -> None:
        """Let an inner session that creates its id on first use create it (one read)."""
        if self._id is None and not _has_id(self.inner):
            await self.inner.get_items(1)

    @property
    def _log(self) -> Session:
        """The numbering log, opened on first use (when the id is known)."""
        if self._opened_log is None:
            self._opened_log = self._plain_member("seq")
        return self._opened_log

    def wrap_member(self, member: Session) -> Session:
        """Side stores for the layers above are numbered in turn."""
        return sequenced(member, self._factory)

    def _lock(self) -> asyncio.Lock:
        locks = _LOCKS.setdefault(asyncio.get_running_loop(), weakref.WeakValueDictionary())
        if self._key is None:  # known once the id is (an inner's own id may come later)
            self._key = _store_key(self.inner, self.session_id)
        self._held = locks.setdefault(self._key, asyncio.Lock())
        return self._held

    # -- the numbering -------------------------------------------------------------------------

    async def _count(self) -> list[Any]:
        return list(await self.inner.get_items(ALL_ITEMS))

    async def _numbering(self) -> Numbering:
        """The numbering of the foreign items as they are now (lock held); also remembers
        the newest item's digest in ``self._newest``."""
        records: list[Any] = list(await self._log.get_items(1))
        newest = await self.inner.get_items(1)
        digest = self._newest = _digest(newest[-1]) if newest else None
        record = records[-1] if records else None
        if not (
            isinstance(record, dict)
            and record.get("type") == NUMBERING_TYPE
            and isinstance(record.get("after"), list)
        ):
            if not newest:
                return Numbering()
            adopted = Numbering().renumbered(len(await self._count()))  # an existing history
            await self._record(adopted, adopted, digest, digest)
            return adopted
        key = (record.get("id"), digest)
        if self._resolved is not None and self._resolved[0] == key:
            return self._resolved[1].copy()
        after = Numbering.from_json(record["after"])
        before = Numbering.from_json(record["before"])
        candidates = [
            state
            for state, last in ((after, record.get("last")), (before, record.get("was")))
            if last == digest
        ]
        if len(candidates) == 1 or (candidates and after.n == before.n):
            state = candidates[0]
            state.high = max(after.high, before.high)
        else:
            state = await self._recount(after, before, record.get("last"))
            state.high = max(after.high, before.high, state.high)
            # Numbers handed out from now on must survive: record what was counted.
            await self._record(state, state, digest, digest)
            key = (None, digest)
        self._resolved = (key, state.copy())
        return state

    async def _recount(self, after: Numbering, before: Numbering, last: Any) -> Numbering:
        """Resolve the numbering by counting the foreign items (after an ambiguous or a
        foreign change)."""
        items = await self._count()
        m = len(items)
        for state in (after, before):
            if state.n == m:
                return state
        if m > after.n and (after.n == 0 or _digest(items[after.n - 1]) == last):
            extended = after.copy()
            extended.added(m - after.n)  # appended behind the adapter: numbered on
            return extended
        return (after if after.n >= before.n else before).renumbered(m)  # else: fresh numbers

    async def _record(self, before: Numbering, after: Numbering, was: Any, last: Any) -> None:
        await self._log.add_items(
            [
                {  # type: ignore[list-item]
                    "type": NUMBERING_TYPE,
                    "id": uuid.uuid4().hex,
                    "before": before.to_json(),
                    "after": after.to_json(),
                    "was": was,
                    "last": last,
                }
            ]
        )

    # -- the Session API -----------------------------------------------------------------------

    async def get_items(
        self, limit: int | None = None, *, wrapper: Any = None
    ) -> list[TResponseInputItem]:
        """Return the foreign session's items, as it does."""
        limit = self.resolve_limit(limit)
        if limit is not None and limit <= 0:
            return []
        return await self.in_scope(wrapper).get_items(limit)  # type: ignore[no-any-return]

    async def add_items(self, items: list[TResponseInputItem], *, wrapper: Any = None) -> None:
        """Append ``items`` as one batch, numbering them."""
        if self.context_aware:  # passed through, unnumbered (module docstring)
            encode_batch(items)
            await self.in_scope(wrapper).add_items(items)
            return
        await self.add_sequenced_items(items)

    async def add_sequenced_items(self, items: list[TResponseInputItem]) -> list[int]:
        """Append ``items`` as one batch; return their sequence numbers.

        Raises:
            InvalidItemError: an item is not a JSON object (nothing is written).
        """
        encode_batch(items)
        if not items:
            return []
        await self._started()
        async with self._lock():
            before = await self._numbering()
            was, last = self._newest, _digest(items[-1])
            after = before.copy()
            seqs = after.added(len(items))
            await self._record(before, after, was, last)
            await self.inner.add_items(items)
            landed = await self.inner.get_items(len(items) + 1)
            expected = len(items) + (1 if before.n else 0)
            if (
                len(landed) == expected
                and _digest(landed[-1]) == last
                and (not before.n or _digest(landed[0]) == was)
            ):
                return seqs
            return await self._number_interleaved(before, was, items)

    async def _number_interleaved(
        self, before: Numbering, was: str | None, batch: list[Any]
    ) -> list[int]:
        """Number a history in which another writer's items landed around ``batch`` (a
        foreign session that retries a conflicting write, such as the SDK's DaprSession, puts
        the batch behind them); return the batch's numbers (lock held)."""
        items = await self._count()
        m, k = len(items), len(batch)
        if before.n == 0 or (m >= before.n and _digest(items[before.n - 1]) == was):
            state, first = before.copy(), before.n
            state.added(m - before.n)  # numbered on, in commit order
        else:
            state, first = before.renumbered(m), 0
        mine = [_digest(item) for item in batch]
        found = [_digest(item) for item in items[first:]]
        starts = [p for p in range(len(found) - k, -1, -1) if found[p : p + k] == mine]
        if not starts and first == before.n and m == first + k:
            # Exactly k items landed behind the old newest: the batch, read back in the store's
            # own form (the OpenAI Conversations API adds ids; tests/test_foreign.py::
            # test_a_conversation_created_on_first_use_is_numbered).
            starts = [0]
        if starts:
            seqs = [state.seq_at(first + starts[0] + 1 + i) for i in range(k)]
        else:  # already removed by another writer: numbers that nothing holds
            seqs = list(range(state.high + 1, state.high + k + 1))
            state.high += k
        newest = _digest(items[-1]) if items else None
        await self._record(state, state, newest, newest)
        self._resolved = None
        return seqs

    async def pop_item(self, *, wrapper: Any = None) -> TResponseInputItem | None:
        """Remove and return the newest item, or None."""
        if self.context_aware:
            return await self.in_scope(wrapper).pop_item()  # type: ignore[no-any-return]
        await self._started()
        async with self._lock():
            return await self._pop()

    async def pop_checked(self, check: Callable[[Any], Any]) -> Any:
        """Remove the newest item and return ``check(item)`` (None when empty); when ``check``
        raises, nothing is removed (CHECKED_POP: one step for writers through this adapter,
        which it serialises per store and session id)."""
        await self._started()
        async with self._lock():
            newest = await self.inner.get_items(2)
            if not newest:
                return None
            result = check(newest[-1])
            await self._pop(newest)
            return result

    async def _pop(self, newest: list[Any] | None = None) -> TResponseInputItem | None:
        """``pop_item`` with the lock held (``newest``: the 2 newest items, when read)."""
        before = await self._numbering()
        if not before.n:
            return await self.inner.pop_item()  # nothing numbered; let it say so
        if newest is None:
            newest = await self.inner.get_items(2)
        after = before.truncated(before.n - 1)
        was = _digest(newest[-1]) if newest else None
        last = _digest(newest[-2]) if len(newest) > 1 else None
        await self._record(before, after, was, last)
        return await self.inner.pop_item()

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Delete every item and the numbering's history, keeping its high-water mark: later
        numbers are higher than every number given out before (layers keep numbers)."""
        if self.context_aware:
            await self.in_scope(wrapper).clear_session()
            return
        if self._id is None and not _has_id(self.inner):
            return await self.inner.clear_session()  # nothing numbered yet, nothing to keep
        async with self._lock():
            before = await self._numbering()
            cleared = Numbering(0, before.high)
            await self._record(before, cleared, self._newest, None)
            await self.inner.clear_session()
            self._resolved = None
            await run_to_completion(self._restart_log(cleared))

    async def _restart_log(self, cleared: Numbering) -> None:
        # Between these two steps an empty log would restart numbers at 1: not cancellable.
        await self._log.clear_session()
        await self._record(cleared, cleared, None, None)

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, TResponseInputItem]]:
        """Return ``(seq, item)`` with after < seq < before, the latest ``limit``, oldest
        first. Reads the foreign items from the first one returned to the newest."""
        if limit is not None and limit <= 0:
            return []
        await self._started()
        async with self._lock():
            for _ in range(3):
                state = await self._numbering()
                lo = 0 if after is None else state.below(after + 1)
                hi = state.n if before is None else state.below(before)
                if limit is not None:
                    lo = max(lo, hi - limit)
                if hi <= lo:
                    return []
                items = await self.inner.get_items(state.n - lo)
                if len(items) == state.n - lo:
                    return [(state.seq_at(lo + 1 + i), items[i]) for i in range(hi - lo)]
                self._resolved = None  # the foreign session changed under us: number again
            raise RuntimeError(
                f"the foreign session {self.session_id!r} kept changing while being read, or "
                "its reads leave stored items out; ForeignSession cannot number it"
            )

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        """Return how many items have after < seq < before."""
        await self._started()
        async with self._lock():
            state = await self._numbering()
        lo = 0 if after is None else state.below(after + 1)
        hi = state.n if before is None else state.below(before)
        return max(0, hi - lo)

    async def _release(self) -> None:
        """Close the numbering log, then the side stores and the foreign session."""
        if self._opened_log is not None:
            await close_quietly(self._opened_log)
        await super()._release()


__all__ = ["ForeignSession", "SiblingFactory", "expiring_layer", "is_sequenced", "sequenced"]
