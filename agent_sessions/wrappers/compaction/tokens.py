"""Token estimate of a history, used by the default compaction trigger and the window.

``o200k_base`` through ``tiktoken`` (extra ``[tokens]``), else :func:`estimate_text` (ASCII
characters / 4, CJK characters one each, other characters one half), plus
:data:`PER_ITEM_OVERHEAD` per item and :func:`media_tokens` for images and files (never
counted as text). The encoding loads once per process in a worker thread; only the first
estimate waits for it (up to ``load_timeout``), and a failed or slow load means the offline
estimate, so the event loop never blocks (docs/compaction.md, "Token estimate").
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import math
import re
import struct
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from ...core.textsearch import CJK_CLASS
from .text import item_text

logger = logging.getLogger("agent_sessions.compaction")

PER_ITEM_OVERHEAD = 4
"""Tokens added per item for role and framing."""

DEFAULT_ENCODING = "o200k_base"
OFFLINE = "offline"
"""The method name of the estimate made without an encoding (:func:`estimate_text`)."""

_CJK = re.compile(CJK_CLASS)
CJK_TOKENS = 1.0
"""Tokens per Hangul/Han/Kana character offline: cl100k counts 0.8-1.1 each (docs)."""
OTHER_TOKENS = 0.5
"""Tokens per character that is neither ASCII nor CJK (accented Latin, Cyrillic, emoji...)."""
IMAGE_BASE, IMAGE_TILE, IMAGE_UNKNOWN = 85, 170, 765
"""OpenAI's image cost: 85 tokens, plus 170 per 512 px tile at ``detail`` high/auto; 765 (a
768 px square: 4 tiles) when the size cannot be read from the item."""
FILE_UNKNOWN = 1000
"""Tokens of a file given by id or URL (its size is not in the item)."""

_OFF_LOOP_CHARS = 200_000
"""Above this many characters, tokenizing moves to a worker thread."""

_loads: dict[str, Future[Any]] = {}
_waited: set[str] = set()
_loads_lock = threading.Lock()


def estimate_text(text: str) -> int:
    """Tokens of ``text`` without a tokenizer: ASCII characters / 4, each Hangul/Han/Kana
    character :data:`CJK_TOKENS`, any other :data:`OTHER_TOKENS` (measured against tiktoken:
    docs/compaction.md, "Token estimate")."""
    if text.isascii():
        return math.ceil(len(text) / 4)
    ascii_chars = len(text.encode("ascii", "ignore"))
    cjk = len(_CJK.findall(text))
    other = len(text) - ascii_chars - cjk
    return math.ceil(ascii_chars / 4 + cjk * CJK_TOKENS + other * OTHER_TOKENS)


def _image_size(url: str) -> tuple[int, int] | None:
    """The pixel size of a PNG, GIF or JPEG in a ``data:`` URL, or None."""
    if not url.startswith("data:") or "base64," not in url[:100]:
        return None
    head = url.split("base64,", 1)[1][:88_000]  # the header and a JPEG's first segments
    try:
        data = base64.b64decode(head[: len(head) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    at = 2
    while data[:2] == b"\xff\xd8" and at + 9 <= len(data) and data[at] == 0xFF:
        marker, length = data[at + 1], struct.unpack(">H", data[at + 2 : at + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None


def image_tokens(width: int, height: int, detail: str = "auto") -> int:
    """OpenAI's token cost of an image: 85 at ``detail="low"``; else scaled to fit 2048 px,
    then its short side to 768 px, 85 + 170 per 512 px tile."""
    if detail == "low" or width <= 0 or height <= 0:
        return IMAGE_BASE
    fit = min(1.0, 2048 / max(width, height))
    scale = fit * min(1.0, 768 / (min(width, height) * fit))
    tiles = math.ceil(width * scale / 512) * math.ceil(height * scale / 512)
    return IMAGE_BASE + IMAGE_TILE * tiles


def media_tokens(item: Any) -> int:
    """Tokens of the images and files in ``item``'s content (or a tool output's), counted by
    their size, not as text: see :func:`image_tokens`; a file given inline as
    ``file_data`` (base64) as its decoded bytes / 4, else :data:`FILE_UNKNOWN`."""
    if not isinstance(item, dict):
        return 0
    parts = item.get("content", item.get("output"))
    total = 0
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "input_image":
            url = part.get("image_url")
            detail = part.get("detail") or "auto"
            size = _image_size(url) if isinstance(url, str) else None
            if detail == "low":
                total += IMAGE_BASE
            else:
                total += IMAGE_UNKNOWN if size is None else image_tokens(*size, detail)
        elif kind == "input_file":
            data = part.get("file_data")
            if isinstance(data, str) and data:
                encoded = data.split("base64,")[-1].strip()
                total += math.ceil((len(encoded) * 3 // 4 - encoded[-2:].count("=")) / 4)
            else:
                total += FILE_UNKNOWN
    return total


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
        encoding: tiktoken encoding name, or None to always estimate offline (``estimate_text``).
        load_timeout: seconds to wait for the encoding the first time (in a worker thread).
    """

    def __init__(self, encoding: str | None = DEFAULT_ENCODING, load_timeout: float = 2.0) -> None:
        self.encoding_name = encoding
        self.load_timeout = load_timeout
        self._encoding: Any = None
        self._failed = encoding is None

    @property
    def method(self) -> str:
        """``"tiktoken:<encoding>"`` when the tokenizer is in use, else ``"offline"``
        (:func:`estimate_text`)."""
        return f"tiktoken:{self.encoding_name}" if self._encoding is not None else OFFLINE

    async def ensure_loaded(self) -> None:
        """Load the tokenizer off the event loop. Only the first caller in a process waits (up to
        ``load_timeout``); later ones use the offline estimate until a slow load finishes."""
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
                    "tiktoken encoding %r is slow to load; estimating offline until it is ready",
                    name,
                )
                return
            except Exception:
                pass  # reported below
        if future.exception() is not None:
            self._failed = True
            logger.info(
                "token estimate falls back to the offline estimate: tiktoken encoding %r "
                "unavailable (%s)",
                name,
                future.exception(),
            )
        else:
            self._encoding = future.result()

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` with the current method."""
        if self._encoding is not None:
            return len(self._encoding.encode(text, disallowed_special=()))
        return estimate_text(text)

    def count_item(self, item: Any) -> int:
        """Tokens of one item, framing, images and files included."""
        return self.count_text(item_text(item)) + PER_ITEM_OVERHEAD + media_tokens(item)

    async def count_items(self, items: Sequence[Any]) -> list[int]:
        """Per-item token counts; large inputs are tokenized in a worker thread."""
        await self.ensure_loaded()
        texts = [item_text(item) for item in items]
        media = [media_tokens(item) for item in items]

        def count() -> list[int]:
            return [
                self.count_text(t) + PER_ITEM_OVERHEAD + m
                for t, m in zip(texts, media, strict=True)
            ]

        if self._encoding is None or sum(map(len, texts)) < _OFF_LOOP_CHARS:
            return count()
        return await asyncio.to_thread(count)
