"""Token counts of shown items for the window, with the compaction layer's estimator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..compaction.text import item_text
from ..compaction.tokens import OFFLINE, TokenEstimator, media_tokens

_CACHE_SIZE = 8192


class ItemTokens:
    """Counts items with ``estimator``; tokenizer results are cached by text, so a window read
    again after a turn only tokenizes the new items."""

    def __init__(self, estimator: TokenEstimator | None = None) -> None:
        self.estimator = estimator if estimator is not None else TokenEstimator()
        self._cache: dict[str, int] = {}

    async def counts(self, items: Sequence[Any]) -> list[int]:
        """Per-item token estimates, framing included."""
        await self.estimator.ensure_loaded()
        if self.estimator.method == OFFLINE:
            return [self.estimator.count_item(item) for item in items]
        texts = [item_text(item) for item in items]
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            counted = await self.estimator.count_items(
                [{"role": "user", "content": t} for t in missing]
            )
            if len(self._cache) + len(missing) > _CACHE_SIZE:
                self._cache.clear()
            self._cache.update(zip(missing, counted, strict=True))
        return [self._cache[t] + media_tokens(item) for t, item in zip(texts, items, strict=True)]
