"""``BaseSession``: the SDK's SessionABC plus the shared rules every backend of this package obeys.

A backend implements five small coroutines over JSON text; this class does validation, limit
semantics, decoding, cancellation safety and the closed state once for all of them.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from agents.memory import SessionABC, SessionSettings
from agents.memory.session_settings import coerce_session_settings

from ..errors import CorruptItemError, InvalidItemError, SessionClosedError
from .closing import Closing
from .codec import DEFAULT_MAX_ITEM_BYTES, decode_item, encode_batch
from .ids import validate_session_id
from .mutation import run_to_completion
from .sdk_compaction import SDKCompactionHooks

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

logger = logging.getLogger("agent_sessions")

Row = tuple[int, str]
"""A stored item as the backend returns it: (sequence number, JSON text)."""


def check_before(before: object) -> int:
    """Return ``before`` if it is an int (a sequence number bound), else raise TypeError.

    A range delete must never guess: SQLite compares a number with text as "less", so a
    string bound there would delete everything, and ``None`` would silently delete nothing.
    """
    if isinstance(before, bool) or not isinstance(before, int):
        raise TypeError(f"before must be an int sequence number, got {before!r}")
    return before


class BaseSession(SDKCompactionHooks, SessionABC):
    """Common behaviour of this package's backends.

    Args:
        session_id: the conversation's id; 1-256 characters, no NUL, not starting with ``\\x1e``.
        session_settings: SDK settings; ``limit`` is the default for ``get_items()``.
        max_item_bytes: largest accepted item, as UTF-8 JSON (default 16 MiB).
        strict: raise :class:`CorruptItemError` on a stored item that no longer decodes, instead
            of skipping it with a logged warning.
    """

    session_settings: SessionSettings | None = None
    _single_dispatch_writes = False
    """True when each write is handed to the store in one step that cannot be half-done by a
    cancellation (in-process, or one queued call), so no extra task is needed to finish it."""

    def __init__(
        self,
        session_id: str,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        strict: bool = False,
        _internal_id: bool = False,
    ) -> None:
        self.session_id = validate_session_id(session_id, internal=_internal_id)
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        if not isinstance(max_item_bytes, int) or max_item_bytes <= 0:
            raise ValueError(f"max_item_bytes must be a positive int, got {max_item_bytes!r}")
        self.max_item_bytes = max_item_bytes
        self.strict = strict
        self._closed = False
        self._closing: Closing | None = None

    # -- what a backend implements -------------------------------------------------------------

    @abstractmethod
    async def _append(self, payloads: list[str]) -> list[int]:
        """Store ``payloads`` as one atomic, contiguous batch; return their sequence numbers."""

    @abstractmethod
    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        """Return the latest ``limit`` rows (all when None) with after < seq < before, oldest
        first."""

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

    # -- the SDK's Session API ---------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items, oldest first.

        ``None`` uses ``session_settings.limit`` (all items when that is None too); a limit
        of 0 or below returns ``[]`` without reading.
        """
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and limit <= 0:
            return []
        self._check_open()
        return self._decode_rows(await self._load(limit))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` as one all-or-nothing batch; ``[]`` is a no-op.

        Raises:
            InvalidItemError: an item is not a JSON object or is too large (nothing written).
        """
        await self.add_sequenced_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, or None when the session is empty."""
        self._check_open()
        while True:
            payload = await self._mutate(self._pop())
            if payload is None:
                return None
            item = self._decode(payload, None)
            if item is not None:
                return item  # type: ignore[no-any-return]

    async def clear_session(self) -> None:
        """Delete every item of this session."""
        self._check_open()
        await self._mutate(self._clear())

    # -- sequenced items (capability) ---------------------------------------------------------

    async def add_sequenced_items(self, items: list[TResponseInputItem]) -> list[int]:
        """Like ``add_items``; returns the new items' sequence numbers."""
        self._check_open()  # before the empty check: the SDK refuses [] on a closed session
        payloads = encode_batch(items, self.max_item_bytes)
        if not payloads:
            return []
        seqs: list[int] = await self._mutate(self._append(payloads))
        return seqs

    async def get_sequenced_items(
        self,
        limit: int | None = None,
        *,
        after: int | None = None,
        before: int | None = None,
    ) -> list[tuple[int, TResponseInputItem]]:
        """Return ``(seq, item)`` with after < seq < before; the latest ``limit``, oldest first."""
        if limit is not None and limit <= 0:
            return []
        self._check_open()
        out: list[tuple[int, TResponseInputItem]] = []
        for seq, payload in await self._load(limit, after, before):
            item = self._decode(payload, seq)
            if item is not None:
                out.append((seq, item))
        return out

    async def count_items(self, *, after: int | None = None, before: int | None = None) -> int:
        """Return how many items have after < seq < before."""
        self._check_open()
        return await self._count(after, before)

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def close(self) -> Closing:
        """Release this session's resources; idempotent. Later use raises SessionClosedError.

        Works called bare, like the SDK's sync ``SQLiteSession.close()`` (the session is
        closed at once; the release finishes in the background, or right away when no event
        loop runs), or awaited, which waits for the release. A session over a client or
        engine the caller passed in leaves it open (see ``_owns_resources``).
        """
        if self._closing is None:
            self._closed = self._closed or self._owns_resources()
            self._closing = Closing(self._close() if self._closed else None)
        return self._closing

    def _owns_resources(self) -> bool:
        """Whether closing ends this session: False for one over the caller's own client,
        whose close is a no-op as in the SDK."""
        return True

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
                f"{type(self).__name__} is closed (session {self.session_id!r}); open a new "
                "session"
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

    def _decode_rows(self, rows: list[Row]) -> list[TResponseInputItem]:
        out = []
        for seq, payload in rows:
            item = self._decode(payload, seq)
            if item is not None:
                out.append(item)
        return out


__all__ = ["BaseSession", "InvalidItemError", "Row", "check_before"]
