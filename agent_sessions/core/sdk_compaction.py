"""The hooks ``OpenAIResponsesCompactionSession`` looks for (``_get_compaction_snapshot``,
``_atomic_replace_items``; without them it skips compaction under a short limit and replaces
by clear + add), given to a backend that implements ``_replace_rows``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .codec import decode_item, encode_batch

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

Row = tuple[int, str]


class SDKCompactionHooks:
    """Mixin of ``BaseSession``: the SDK compaction session's hooks over ``_replace_rows``."""

    if TYPE_CHECKING:  # BaseSession's, which these hooks use
        max_item_bytes: int

        def _check_open(self) -> None: ...

        async def _load(
            self, limit: int | None, after: int | None = None, before: int | None = None
        ) -> list[Row]: ...

        async def _mutate(self, awaitable: Any) -> Any: ...

    async def _replace_rows(
        self,
        expected: list[Row] | None,
        payloads: list[str],
        prune: Callable[[str], bool] | None,
    ) -> bool:
        """In one transaction, unless the newest rows differ from ``expected`` (then return
        False): delete them (all rows when None), delete the oldest rows while ``prune(text)``
        holds, append ``payloads``, return True. Optional."""
        raise NotImplementedError

    def _replaces_rows(self) -> bool:
        return type(self)._replace_rows is not SDKCompactionHooks._replace_rows

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """The SDK's hook: the latest ``limit`` items, whether they are the whole history, and
        ``replace_suffix(start, items)``, which atomically swaps ``items`` for the snapshot's
        items from ``start`` on, or returns False when those changed meanwhile."""
        try:
            from agents.memory.session import _CompactionSnapshot
        except ImportError:  # pragma: no cover - an SDK without the hook
            return None
        if not self._replaces_rows() or limit <= 0:
            return None
        self._check_open()
        rows = await self._load(limit + 1)
        complete = len(rows) <= limit
        rows = rows[-limit:]
        try:
            items = [decode_item(text) for _, text in rows]
        except ValueError:
            return None  # a damaged row: let the SDK fall back to its checked path
        prune = None if prune_prefix is None else _pruner(prune_prefix)

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            expected = rows[start:]
            if not expected:
                return False
            payloads = encode_batch(output, self.max_item_bytes)
            return bool(await self._mutate(self._replace_rows(expected, payloads, prune)))

        return _CompactionSnapshot(items, complete, replace_suffix)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """The SDK's hook: replace the whole history by ``items`` in one transaction; False
        when this backend cannot (the SDK then clears and adds)."""
        payloads = encode_batch(items, self.max_item_bytes)  # a bad batch raises first
        if not self._replaces_rows():
            return False
        self._check_open()
        return bool(await self._mutate(self._replace_rows(None, payloads, None)))


def _pruner(prune_prefix: Callable[[Any], bool]) -> Callable[[str], bool]:
    def prune(text: str) -> bool:
        try:
            return bool(prune_prefix(decode_item(text)))
        except ValueError:
            return False

    return prune


__all__ = ["SDKCompactionHooks"]
