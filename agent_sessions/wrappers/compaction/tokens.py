"""Token estimate of a history, used by the default compaction trigger.

``o200k_base`` through ``tiktoken`` (extra ``[tokens]``), else ``ceil(characters / 4)``, plus
:data:`PER_ITEM_OVERHEAD` per item. The encoding loads once per process in a worker thread;
only the first estimate waits for it (up to ``load_timeout``), and a failed or slow load means
characters / 4, so the event loop never blocks (docs/compaction.md, "Token estimate").
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from .text import item_text

logger = logging.getLogger("agent_sessions.compaction")

PER_ITEM_OVERHEAD = 4
"""Tokens added per item for role and framing."""

DEFAULT_ENCODING = "o200k_base"

_OFF_LOOP_CHARS = 200_000
"""Above this many characters, tokenizing moves to a worker thread."""

_loads: dict[str, Future[Any]] = {}
_waited: set[str] = set()
_loads_lock = threading.Lock()


def _start_loading(name: str) -> Future[Any]:
    with _loads_lock:
        future = _loads.get(name)
        if future is None:
            future = _loads[name] = Future()

            def load() -> None:
                try:
                    import tiktoken

                    future.set_result(tiktoken.get_encoding(name))
                except BaseException as exc:  # ImportError, network errors, bad name
                    future.set_exception(exc)

            threading.Thread(target=load, name=f"tiktoken-load-{name}", daemon=True).start()
        return future


class TokenEstimator:
    """Estimates the tokens of a list of items.

    Args:
        encoding: tiktoken encoding name, or None to always use characters / 4.
        load_timeout: seconds to wait for the encoding the first time (in a worker thread).
    """

    def __init__(self, encoding: str | None = DEFAULT_ENCODING, load_timeout: float = 2.0) -> None:
        self.encoding_name = encoding
        self.load_timeout = load_timeout
        self._encoding: Any = None
        self._failed = encoding is None

    @property
    def method(self) -> str:
        """``"tiktoken:<encoding>"`` when the tokenizer is in use, else ``"chars/4"``."""
        return f"tiktoken:{self.encoding_name}" if self._encoding is not None else "chars/4"

    async def ensure_loaded(self) -> None:
        """Load the tokenizer off the event loop. Only the first caller in a process waits (up to
        ``load_timeout``); later ones use characters / 4 until a slow load finishes."""
        if self._encoding is not None or self._failed or self.encoding_name is None:
            return
        name = self.encoding_name
        future = _start_loading(name)
        if not future.done():
            with _loads_lock:
                first = name not in _waited
                _waited.add(name)
            if not first:
                return
            try:
                await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(future)), timeout=self.load_timeout
                )
            except asyncio.TimeoutError:
                logger.info(
                    "tiktoken encoding %r is slow to load; estimating characters/4 "
                    "until it is ready",
                    name,
                )
                return
            except Exception:
                pass  # reported below
        if future.exception() is not None:
            self._failed = True
            logger.info(
                "token estimate falls back to characters/4: tiktoken encoding %r unavailable (%s)",
                name,
                future.exception(),
            )
        else:
            self._encoding = future.result()

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` with the current method."""
        if self._encoding is not None:
            return len(self._encoding.encode(text, disallowed_special=()))
        return math.ceil(len(text) / 4)  # the fallback: characters / 4

    def count_item(self, item: Any) -> int:
        """Tokens of one item, framing included."""
        return self.count_text(item_text(item)) + PER_ITEM_OVERHEAD

    async def count_items(self, items: Sequence[Any]) -> list[int]:
        """Per-item token counts; large inputs are tokenized in a worker thread."""
        await self.ensure_loaded()
        texts = [item_text(item) for item in items]

        def count() -> list[int]:
            return [self.count_text(t) + PER_ITEM_OVERHEAD for t in texts]

        if self._encoding is None or sum(map(len, texts)) < _OFF_LOOP_CHARS:
            return count()
        return await asyncio.to_thread(count)
