"""``BaseSession``: the SDK's SessionABC over five backend coroutines on JSON text, with
validation, limits, decoding, cancellation safety and the closed state written once."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from abc import abstractmethod
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, cast

# From the submodules, not agents.memory: the CLI preloads just these (cli/light_sdk.py).
from agents.memory.session import SessionABC
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from ..errors import CommitConflictError, CorruptItemError, InvalidItemError, SessionClosedError
from .capabilities import Capability, supports
from .closing import Closing, release_here
from .codec import DEFAULT_MAX_ITEM_BYTES, decode_item, encode_batch
from .commit import (
    Append,
    Expect,
    Op,
    Pop,
    commit_by_api,
    pop_checked_by_api,
    pop_checked_of,
    pop_if_newest_is,
)
from .family import REGISTRY, Family, SharedMembers, purposes_in
from .ids import derive_sibling_id, validate_session_id
from .mutation import run_to_completion
from .options import OptionsChecked
from .sdk_compaction import SDKCompactionHooks
from .telemetry import traced
from .textsearch import Between, Equal, check_search

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from agents.items import TResponseInputItem
    from agents.memory import Session
    from typing_extensions import Self

    from .capabilities import Read, SupportsSequencedItems

logger = logging.getLogger("agent_sessions")

Row = tuple[int, str]
"""A stored item as the backend returns it: (sequence number, JSON text)."""

_UNDECODABLE = object()


def _epoch(name: str, when: object) -> float:
    if not isinstance(when, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(when).__name__}")
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def check_before(before: object) -> int:
    """Return ``before`` if it is an int sequence number, else raise TypeError."""
    if isinstance(before, bool) or not isinstance(before, int):
        raise TypeError(f"before must be an int sequence number, got {before!r}")
    return before


class StoreOptions(TypedDict, total=False):
    """The options every backend's constructor takes and passes on to ``BaseSession``."""

    session_settings: SessionSettings | dict[str, Any] | None
    max_item_bytes: int
    strict: bool
    _internal_id: bool
    _shared_member: bool


STORE_CAPABILITIES: frozenset[Capability] = frozenset(
    {
        Capability.SEQUENCED,
        Capability.RANGE_DELETE,
        Capability.REWRITE,
        Capability.FAMILY,
        Capability.SEQUENCED_WRITE,
        Capability.FAMILY_BATCH,
        Capability.GUARDED_WRITE,
        Capability.CHECKED_POP,
        Capability.COMMIT,
    }
)
"""What a backend built on this template offers once it implements every hook."""


class BaseSession(OptionsChecked, SDKCompactionHooks, SessionABC):
    """Common behaviour of this package's backends.

    Args:
        session_id: the conversation's id; 1-256 characters, no NUL, not starting with ``\\x1e``.
        session_settings: SDK settings; ``limit`` is the default for ``get_items()``.
        max_item_bytes: largest accepted item, as UTF-8 JSON (default 16 MiB).
        strict: raise :class:`CorruptItemError` on a stored item that no longer decodes, instead
            of skipping it with a logged warning.
    """

    session_settings: SessionSettings | None = None
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.SEQUENCED})
    """What this backend offers; each capability beyond SEQUENCED needs its hook."""
    _single_dispatch_writes = False
    """True when a cancellation cannot split a write (no task needed to finish it)."""

    def __init__(
        self,
        session_id: str,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        strict: bool = False,
        _internal_id: bool = False,
        _shared_member: bool = False,
    ) -> None:
        self.session_id = validate_session_id(session_id, internal=_internal_id)
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        if not isinstance(max_item_bytes, int) or max_item_bytes <= 0:
            raise ValueError(f"max_item_bytes must be a positive int, got {max_item_bytes!r}")
        self.max_item_bytes, self.strict = max_item_bytes, strict
        self._closed = False
        self._family: Family | None = None
        self._registration: tuple[Callable[[], BaseSession], str] | None = None
        self._closing: Closing | None = None
        self._shared_member = _shared_member

    # -- what a backend implements -------------------------------------------------------------

    @abstractmethod
    async def _append(self, payloads: list[str]) -> list[int]:
        """Store ``payloads`` as one atomic, contiguous batch; return their sequence numbers."""

    async def _append_unnumbered(self, payloads: list[str]) -> None:
        """``_append`` without returning the numbers (override where that saves work)."""
        await self._append(payloads)

    @abstractmethod
    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        """The latest ``limit`` rows (all when None) with after < seq < before, oldest first."""

    @abstractmethod
    async def _pop(self) -> str | None:
        """Atomically delete the newest row and return its payload, or None when empty."""

    @abstractmethod
    async def _clear(self) -> None:
        """Delete every row of this session."""

    @abstractmethod
    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        """Count rows with after < seq < before."""

    async def _close(self) -> None:
        """Release what this session holds; called once."""

    async def _delete_before(self, before: int) -> int:
        """Atomically delete the rows with seq < ``before``; return how many (RANGE_DELETE)."""
        raise NotImplementedError(f"{type(self).__name__} does not delete ranges")

    async def _rewrite(self, rows: list[Row]) -> int:
        """Atomically replace each existing row's payload; return how many (REWRITE)."""
        raise NotImplementedError(f"{type(self).__name__} does not rewrite items")

    async def _write_at(self, rows: list[Row], created: float, updated: float) -> None:
        """Atomically store ``rows`` at their numbers and these epoch times into this empty
        session, else raise SequenceConflictError (SEQUENCED_WRITE)."""
        raise NotImplementedError(f"{type(self).__name__} does not write at given numbers")

    async def _search_text(
        self, words: list[str], limit: int, equal: Equal, between: Between
    ) -> list[tuple[int, str, float]]:
        """The ``limit`` best ``(seq, payload, score)`` matching any of ``words`` (never
        empty) and the checked filters, best first (TEXT_SEARCH)."""
        raise NotImplementedError(f"{type(self).__name__} does not search text")

    def _member_options(self) -> dict[str, Any]:
        """Constructor keywords opening another session on this connection (FAMILY)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no session family")

    # -- the SDK's Session API ---------------------------------------------------------------

    @traced("get_items")
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items (None: ``session_settings.limit``, else all),
        oldest first; ``limit <= 0`` returns ``[]``."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        self._check_open()
        return self._decode_rows(await self._load(limit))

    @traced("add_items")
    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` as one all-or-nothing batch; ``[]`` is a no-op.

        Raises:
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
        """
        if type(self).add_sequenced_items is not BaseSession.add_sequenced_items:
            await self.add_sequenced_items(items)  # a subclass's own write path
            return
        # add_sequenced_items without the numbers, inlined: this is every turn's write, and
        # each coroutine layer costs a visible share of a loopback round trip.
        self._check_open()
        payloads = encode_batch(items, self.max_item_bytes)
        if not payloads:
            return
        if self._registration is not None:
            await self._register()
        if self._single_dispatch_writes:
            await self._append_unnumbered(payloads)
        else:
            await run_to_completion(self._append_unnumbered(payloads))

    @traced("pop_item")
    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, or None when the session is empty."""
        self._check_open()
        while True:
            payload = (
                await self._pop()
                if self._single_dispatch_writes
                else await run_to_completion(self._pop())
            )
            if payload is None:
                return None
            item = self._decode(payload, None)
            if item is not None:
                return item  # type: ignore[no-any-return]

    @traced("clear_session")
    async def clear_session(self) -> None:
        """Delete every item of this session."""
        self._check_open()
        await self._mutate(self._clear())

    # -- sequenced items (capability) ---------------------------------------------------------

    @traced("add_items")
    async def add_sequenced_items(self, items: list[TResponseInputItem]) -> list[int]:
        """Like ``add_items``; returns the new items' sequence numbers."""
        self._check_open()  # before the empty check: the SDK refuses [] on a closed session
        payloads = encode_batch(items, self.max_item_bytes)
        if not payloads:
            return []
        if self._registration is not None:
            await self._register()
        return cast("list[int]", await self._mutate(self._append(payloads)))

    async def add_sequenced_family(
        self, writes: list[tuple[Session, list[TResponseInputItem]]]
    ) -> list[list[int]]:
        """Append each ``(session, items)`` in order as ``add_sequenced_items``; one round trip
        (``_append_family``) when all share this store (FAMILY_BATCH).

        Raises:
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
        """
        if not all(isinstance(s, BaseSession) for s, _ in writes):
            return [
                await cast("SupportsSequencedItems", s).add_sequenced_items(items)
                for s, items in writes
            ]
        members = cast("list[tuple[BaseSession, list[TResponseInputItem]]]", writes)
        for session, _ in members:
            session._check_open()
        return await self.add_encoded_family(
            [(s, encode_batch(items, s.max_item_bytes)) for s, items in members]
        )

    async def add_encoded_family(self, writes: list[tuple[Any, list[str]]]) -> list[list[int]]:
        """``add_sequenced_family`` of texts already encoded and size-checked."""
        if not all(isinstance(s, BaseSession) for s, _ in writes):
            decoded = [(s, [decode_item(text) for text in texts]) for s, texts in writes]
            return await self.add_sequenced_family(decoded)  # type: ignore[arg-type]
        for session, _ in writes:
            session._check_open()
        wanted = [(s, payloads) for s, payloads in writes if payloads]
        appended = iter(await self._mutate(self._append_family(wanted)) if wanted else [])
        return [next(appended) if payloads else [] for _, payloads in writes]

    @traced("get_items")
    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, TResponseInputItem]]:
        """Return ``(seq, item)`` with after < seq < before; the latest ``limit``, oldest first."""
        if limit is not None and limit <= 0:
            return []
        self._check_open()
        rows = await self._load(limit, after, before)
        if rows:
            self.listed()
        return self._decode_pairs(rows)

    @traced("count_items")
    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        """Return how many items have after < seq < before."""
        self._check_open()
        return await self._count(after, before)

    async def get_sequenced_family(
        self, reads: list[Read]
    ) -> list[list[tuple[int, TResponseInputItem]]]:
        """Run each read as ``get_sequenced_items``, results in order; one round trip
        (``_load_family``) when all share this store (FAMILY_BATCH)."""
        if not all(isinstance(r[0], BaseSession) for r in reads):
            reading = (
                cast("SupportsSequencedItems", s).get_sequenced_items(limit, after=a, before=b)
                for s, limit, a, b in reads
            )
            return list(await asyncio.gather(*reading))
        members = cast("list[tuple[BaseSession, int | None, int | None, int | None]]", reads)
        for session, *_ in members:
            session._check_open()
        wanted = [r for r in members if r[1] is None or r[1] > 0]
        loaded = iter(await self._load_family(wanted) if wanted else [])
        out: list[list[tuple[int, TResponseInputItem]]] = []
        for session, limit, _, _ in members:
            rows = next(loaded) if limit is None or limit > 0 else []
            if rows:
                session.listed()
            out.append(session._decode_pairs(rows))
        return out

    async def _load_family(
        self, reads: list[tuple[BaseSession, int | None, int | None, int | None]]
    ) -> list[list[Row]]:
        """``_load`` for each read, in order (concurrently; a backend may batch them)."""
        if len(reads) == 1:
            s, limit, after, before = reads[0]
            return [await s._load(limit, after, before)]
        loads = (s._load(limit, after, before) for s, limit, after, before in reads)
        return list(await asyncio.gather(*loads))

    async def _append_family(self, writes: list[tuple[BaseSession, list[str]]]) -> list[list[int]]:
        """``_append`` for each ``(session, payloads)`` in order, registering side stores
        first; one round trip each (a backend may write them atomically at once)."""

        async def each() -> list[list[int]]:
            out = []
            for session, payloads in writes:
                if session._registration is not None:
                    await session._register()
                out.append(await session._append(payloads))
            return out

        if self._single_dispatch_writes and len(writes) > 1:
            return await run_to_completion(each())  # several steps: never stop half-way
        return await each()

    async def commit(self, ops: Sequence[Op], expect: Expect = ()) -> list[Any]:
        """``core.commit.commit``: one ``_commit`` when every session is of this store, else
        ``commit_by_api`` (COMMIT). A side store an op appends to is listed in its family's
        registry first (listed and empty is harmless; written and unlisted is not).

        Raises:
            CommitConflictError: an expectation did not hold; nothing was written.
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
        """
        plain: list[tuple[str, BaseSession, list[str]]] = []
        for op in ops:
            target = op.session
            if not isinstance(target, BaseSession):
                return await commit_by_api(ops, expect)
            target._check_open()
            if isinstance(op, Append):
                plain.append(("append", target, encode_batch(op.items, target.max_item_bytes)))
            else:
                plain.append(("pop", target, []))
        guards = list(expect)
        if not all(isinstance(g, BaseSession) for g, _ in guards):
            return await commit_by_api(ops, expect)
        for _, target, payloads in plain:
            if payloads and target._registration is not None:
                await target._register()
        wanted = [op for op in plain if op[0] == "pop" or op[2]]
        done = await self._mutate(self._commit(wanted, guards))  # type: ignore[arg-type]
        if done is None:
            return await commit_by_api(ops, expect)
        results = iter(done)
        return [
            ([] if not payloads else next(results))
            if kind == "append"
            else target._decode_popped(next(results))
            for kind, target, payloads in plain
        ]

    def _decode_popped(self, payload: str | None) -> Any:
        return None if payload is None else self._decode(payload, None)

    async def _commit(
        self,
        ops: list[tuple[str, BaseSession, list[str]]],
        expect: list[tuple[BaseSession, int | None]],
    ) -> list[Any] | None:
        """Run each ``("append", session, payloads)`` (result: the numbers) or ``("pop",
        session, [])`` (result: the payload or None) in one atomic step while each expected
        session's newest number is as given, else raise CommitConflictError having written
        nothing; None: not atomic here (another store's session), nothing written (COMMIT)."""
        return None

    async def append_if_newest(
        self, guard: Session, seq: int | None, items: list[TResponseInputItem]
    ) -> list[int] | None:
        """Append ``items`` only if ``guard``'s newest number is ``seq`` (None: empty), as one
        ``commit``: the new numbers, or None when the guard moved (nothing written) or, in a
        store without COMMIT, always (declined) (GUARDED_WRITE).

        Raises:
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
        """
        if not supports(self, Capability.COMMIT):  # no one-step check here: declined
            encode_batch(items, self.max_item_bytes)  # (bad items still raise)
            return None
        try:
            (numbers,) = await self.commit([Append(self, items)], [(guard, seq)])
        except CommitConflictError:
            return None
        return numbers  # type: ignore[no-any-return]

    async def pop_if_newest(
        self, guard: Session, seq: int | None, *, newest: int | None = None
    ) -> tuple[bool, Any]:
        """``pop_item`` only if ``guard``'s newest number is ``seq`` and (when given) this
        session's is ``newest``, as one ``commit``: ``(True, item or None)`` (None also for an
        item that does not decode), else ``(False, None)`` (also, declined, in a store without
        COMMIT) (GUARDED_WRITE)."""
        if not supports(self, Capability.COMMIT):  # no one-step check here: declined
            return False, None
        expect = [(guard, seq), *([(self, newest)] if newest is not None else [])]
        try:
            (item,) = await self.commit([Pop(self)], expect)
        except CommitConflictError:
            return False, None
        return True, item

    # -- a pop checked by a layer (capability) -------------------------------------------------

    async def pop_checked(self, check: Callable[[Any], Any]) -> Any:
        """Remove the newest item and return ``check(item)`` (None when empty); when ``check``
        raises, nothing is removed (CHECKED_POP)."""
        self._check_open()
        return await self._pop_checked(check)

    async def _pop_checked(self, check: Callable[[Any], Any]) -> Any:
        if (
            type(self).pop_item is not BaseSession.pop_item
            or type(self)._pop_row_checked is BaseSession._pop_row_checked
        ):
            return await pop_checked_by_api(self, check)
        decode = self._decode

        def on_row(payload: str) -> Any:
            item = decode(payload, None)
            return _UNDECODABLE if item is None else check(item)

        while True:
            result = await self._mutate(self._pop_row_checked(on_row))
            if result is not _UNDECODABLE:
                return result

    async def _pop_row_checked(self, check: Callable[[str], Any]) -> Any:
        """Atomically delete the newest row and return ``check(payload)`` (None when empty);
        when ``check`` raises, delete nothing."""
        raise NotImplementedError(f"{type(self).__name__} does not pop with a check")

    # -- range delete and rewrite in place (capabilities) ---------------------------------------

    @traced("delete_items")
    async def delete_items(self, *, before: int) -> int:
        """Atomically delete the items numbered below ``before``; return how many."""
        before = check_before(before)
        self._check_open()
        return cast(int, await self._mutate(self._delete_before(before)))

    async def rewrite_items(self, pairs: list[tuple[int, TResponseInputItem]]) -> int:
        """Atomically replace the item numbered ``seq`` for each ``(seq, item)``, skipping
        missing numbers; return how many were replaced.

        Raises:
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
            TypeError, ValueError: a pair is not ``(int, item)`` or a number repeats.
        """
        seqs = [check_before(pair[0]) for pair in pairs]
        if len(set(seqs)) != len(seqs):
            raise ValueError("rewrite_items got the same sequence number twice")
        payloads = encode_batch([pair[1] for pair in pairs], self.max_item_bytes)
        if not payloads:
            return 0
        self._check_open()
        return cast(int, await self._mutate(self._rewrite(list(zip(seqs, payloads, strict=True)))))

    # -- full-text search (capability) ----------------------------------------------------------

    @traced("search_text")
    async def search_text(
        self,
        query: str,
        *,
        limit: int = 10,
        equal: Mapping[str, Collection[str]] | None = None,
        between: Mapping[str, tuple[float | None, float | None]] | None = None,
    ) -> list[tuple[int, TResponseInputItem, float]]:
        """Items best matching ``query`` as ``core.capabilities.SupportsTextSearch`` says.

        Raises:
            ValueError: a filter's field name is not ``[a-z_]{1,32}``.
            TypeError: a wrong type of query, limit, filter values or bounds.
        """
        words, equal_, between_ = check_search(query, limit, equal, between)
        if not words or limit <= 0:
            return []
        self._check_open()
        hits = await self._search_text(words, limit, equal_, between_)
        decoded = [(seq, self._decode(payload, seq), score) for seq, payload, score in hits]
        return [hit for hit in decoded if hit[1] is not None]

    # -- writes at given numbers (capability) ---------------------------------------------------

    async def write_sequenced_items(
        self,
        pairs: list[tuple[int, TResponseInputItem]],
        *,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
    ) -> None:
        """Atomically store each ``(seq, item)`` at ``seq`` into this empty session with these
        times (now when None); later appends number above. ``[]`` writes nothing.

        Raises:
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
            TypeError, ValueError: a number is not a positive int, or numbers do not increase.
            SequenceConflictError: the session holds items, or a number is taken in the store
                (nothing written).
        """
        seqs = [check_before(pair[0]) for pair in pairs]
        for i, seq in enumerate(seqs):
            if seq <= 0 or (i and seq <= seqs[i - 1]):
                raise ValueError(
                    f"write_sequenced_items: number {seq} at index {i} is not positive and "
                    "above the previous one; nothing was written"
                )
        payloads = encode_batch([pair[1] for pair in pairs], self.max_item_bytes)
        self._check_open()
        if not payloads:
            return
        updated = time.time() if updated_at is None else _epoch("updated_at", updated_at)
        created = updated if created_at is None else _epoch("created_at", created_at)
        await self._mutate(self._write_at(list(zip(seqs, payloads, strict=True)), created, updated))

    # -- the session family (capability) -------------------------------------------------------

    def sibling(self, session_id: str) -> Self:
        """A session on this connection for ``session_id``, default settings."""
        self._check_open()
        session_id = validate_session_id(session_id, internal=True)
        return type(self)(  # type: ignore[call-arg]
            session_id,
            max_item_bytes=self.max_item_bytes,
            strict=self.strict,
            _internal_id=True,
            **self._member_options(),
        )

    def side_store(self, purpose: str) -> Self:
        """This session's side store for ``purpose``, closed with it; where the store keeps
        side stores (``_shared_members``), one object shared by its session objects."""
        self._check_open()
        if self._family is None:
            self._family = Family()
        return cast("Self", self._family.member(purpose, self._open_member))

    def _shared_members(self) -> tuple[SharedMembers, dict[str, Any]] | None:
        """Where the store keeps the side stores it shares, and the constructor keywords that
        open one (as ``_member_options``, holding no share of the store); None: each object
        opens its own."""
        return None

    def _open_member(self, purpose: str) -> Self:
        shared = self._shared_members()
        if shared is None:
            member = self.sibling(derive_sibling_id(self.session_id, purpose))
            registry: Callable[[], BaseSession] = functools.partial(self.side_store, REGISTRY)
        else:
            member = self._store_member(*shared, purpose)
            registry = functools.partial(self._store_member, *shared, REGISTRY)
        if purpose != REGISTRY:
            # Each object lists it on its first write, as if it had opened its own.
            member._registration = (registry, purpose)
        return member

    def _store_member(self, shared: SharedMembers, options: dict[str, Any], purpose: str) -> Self:
        key = (self.session_id, purpose, self.max_item_bytes, self.strict, *options.items())
        return cast(
            "Self",
            shared.get(
                key,
                lambda: type(self)(  # type: ignore[call-arg]
                    derive_sibling_id(self.session_id, purpose),
                    max_item_bytes=self.max_item_bytes,
                    strict=self.strict,
                    _internal_id=True,
                    _shared_member=True,
                    **options,
                ),
            ),
        )

    async def family_purposes(self) -> list[str]:
        """The purposes of every side store ever written in this session's family."""
        return purposes_in(await self.side_store(REGISTRY).get_items())

    @property
    def unlisted(self) -> tuple[BaseSession, str] | None:
        """``(registry, purpose)`` until this side store is listed in its family's registry,
        then None."""
        if self._registration is None:
            return None
        registry, purpose = self._registration
        return registry(), purpose

    def listed(self) -> None:
        """Mark this side store as listed in its family's registry."""
        self._registration = None

    async def _register(self) -> None:
        registry, purpose = cast("tuple[BaseSession, str]", self.unlisted)
        if purpose not in purposes_in(await registry.get_items()):
            await registry.add_items([{"purpose": purpose}])  # type: ignore[list-item]
        self._registration = None

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def close(self) -> Closing:
        """Release this session's resources (idempotent); call it bare (the release finishes
        in the background) or await it. A client or engine the caller passed in stays open."""
        if self._closing is None:
            self._closing = Closing(None if self._closed_at_once() else self._release())
        return self._closing

    def _closed_at_once(self) -> bool:
        """Close without I/O when possible; True when done, else ``_release`` must run."""
        self._closed = self._closed or (self._owns_resources() and not self._shared_member)
        return not self._closed or (
            (self._family is None or self._family.close_at_once()) and self._release_at_once()
        )

    def _close_at_once(self) -> bool:
        """``close()`` if it needs no I/O; True when closed (now or before, without error)."""
        if self._closing is not None:
            return self._closing.done and not self._closing.failed
        if type(self).close is not BaseSession.close or not self._closed_at_once():
            return False
        self._closing = Closing(None)
        return True

    def _release_at_once(self) -> bool:
        """Release without I/O (a share others still use); True when done."""
        return False

    async def _close_owned(self) -> None:
        """``close()`` from the release of a session that owns this one (``close_owned``)."""
        if type(self).close is not BaseSession.close:  # a subclass's close does more
            await self.close()
            return
        if self._close_at_once():
            return
        if self._closing is None:
            self._closing, release = release_here(self._release)
            await release
        else:
            await self._closing

    def _owns_resources(self) -> bool:
        """False over the caller's own client, where close is a no-op as in the SDK."""
        return True

    async def _release(self) -> None:
        if self._family is not None:
            await self._family.close()  # the side stores this object opened
        await self._close()

    async def __aenter__(self) -> BaseSession:
        self._check_open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(session_id={self.session_id!r})"

    # -- helpers ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(
                f"{type(self).__name__} is closed (session {self.session_id!r}); open a new session"
            )

    async def _mutate(self, awaitable: Any) -> Any:
        if self._single_dispatch_writes:
            return await awaitable
        return await run_to_completion(awaitable)

    def _decode(self, payload: str | bytes, seq: int | None) -> Any:
        try:
            return decode_item(payload)
        except ValueError as exc:
            where = f"item {seq}" if seq is not None else "an item"
            message = f"{type(self).__name__} {self.session_id!r}: stored {where} does not decode"
            if self.strict:
                raise CorruptItemError(f"{message}: {exc}") from exc
            logger.warning("%s (%s); skipping it", message, exc)
            return None

    def _decode_pairs(self, rows: list[Row]) -> list[tuple[int, TResponseInputItem]]:
        decoded = [(seq, self._decode(payload, seq)) for seq, payload in rows]
        return [(seq, item) for seq, item in decoded if item is not None]

    def _decode_rows(self, rows: list[Row]) -> list[TResponseInputItem]:
        out = []
        for seq, payload in rows:
            item = self._decode(payload, seq)
            if item is not None:
                out.append(item)
        return out


Guarded = tuple[str, BaseSession, list[str], "BaseSession | None", "int | None", "int | None"]


def one_guarded(
    session: BaseSession,
    ops: list[tuple[str, BaseSession, list[str]]],
    expect: list[tuple[BaseSession, int | None]],
    reaches: Callable[[BaseSession], bool],
) -> Guarded | None:
    """A ``_commit`` of the shape a backend with one guarded script or statement serves:
    ``(kind, session, payloads, guard, seq, own)``, one op on ``session`` made while
    ``guard``'s newest number is ``seq`` (guard None: no expectation; else one ``reaches``
    accepts) and, for a pop, its own is ``own`` (None: any); None for any other shape (the
    caller declines it)."""
    if len(ops) != 1 or ops[0][1] is not session:
        return None
    kind, target, payloads = ops[0]
    mine = [seq for g, seq in expect if g.session_id == target.session_id]
    others = [(g, seq) for g, seq in expect if g.session_id != target.session_id]
    if len(others) > 1 or len(mine) > 1 or (others and mine and (kind != "pop" or not mine[0])):
        return None
    if others:
        if not reaches(others[0][0]):
            return None
        return kind, target, payloads, others[0][0], others[0][1], mine[0] if mine else None
    if mine:
        return kind, target, payloads, target, mine[0], None
    return kind, target, payloads, None, None, None


def short_page_is_start(session: object) -> bool:
    """Whether a short page of ``get_sequenced_items`` means no older items (backends; not
    layers that hide items, where only an empty page does)."""
    return isinstance(session, BaseSession)


def keeps_write_path(session: object, *methods: str) -> bool:
    """False when ``session`` is a backend overriding one of ``BaseSession``'s ``methods``."""
    return not isinstance(session, BaseSession) or all(
        getattr(type(session), name) is getattr(BaseSession, name) for name in methods
    )


__all__ = [
    "STORE_CAPABILITIES",
    "BaseSession",
    "InvalidItemError",
    "Row",
    "StoreOptions",
    "check_before",
    "one_guarded",
    "keeps_write_path",
    "pop_checked_by_api",
    "pop_checked_of",
    "pop_if_newest_is",
    "short_page_is_start",
]
