"""Micro-compaction: long texts of older turns shown shortened, without a model.

Only the copy handed to the reader changes, deterministically. Shortened: tool outputs and
message texts; left whole: tool-call arguments (they must stay valid JSON), reasoning, compaction
items, images and files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...core.options import check_int
from .plan import turn_ages

MARKER = "[micro-compacted: {omitted} of {size} characters omitted; the full item is kept]"


@dataclass(frozen=True)
class MicroCompaction:
    """How older items are shortened on read.

    Attributes:
        keep_turns: items of the newest ``keep_turns`` turns are shown whole (0: none are).
        max_chars: a text longer than this is shortened.
        head: characters kept from the start of a shortened text.
        tail: characters kept from its end.
    """

    keep_turns: int = 2
    max_chars: int = 2000
    head: int = 600
    tail: int = 400

    def __post_init__(self) -> None:
        for name in ("keep_turns", "head", "tail"):
            check_int(name, getattr(self, name))
        low = self.head + self.tail
        check_int("max_chars", self.max_chars, low, least_text=f"head + tail ({low})")

    def shorten_text(self, text: str) -> str:
        """Return ``text``, or its head and tail around the marker when it is too long."""
        if len(text) <= self.max_chars:
            return text
        omitted = len(text) - self.head - self.tail
        marker = MARKER.format(omitted=omitted, size=len(text))
        tail = text[len(text) - self.tail :] if self.tail else ""
        return f"{text[: self.head]}\n...{marker}...\n{tail}"

    def shorten(self, item: Any, age: int) -> Any:
        """Return ``item`` as shown at ``age`` turns old: the same object when nothing is
        shortened, else a shortened copy."""
        if age < self.keep_turns or not isinstance(item, dict):
            return item
        kind = item.get("type")
        if isinstance(kind, str) and kind.endswith("_output"):
            return self._shorten_field(item, "output")
        if "role" in item and kind in (None, "message"):
            return self._shorten_field(item, "content")
        return item

    def shorten_all(self, items: Sequence[Any], later_users: int = 0) -> list[Any]:
        """Return ``items`` as shown when ``later_users`` user messages follow the last one."""
        ages = turn_ages(items, later_users)
        return [self.shorten(item, age) for item, age in zip(items, ages, strict=True)]

    def _shorten_field(self, item: dict[str, Any], field: str) -> Any:
        value = item.get(field)
        if isinstance(value, str):
            short: Any = self.shorten_text(value)
        elif isinstance(value, list):
            parts = [self._shorten_part(part) for part in value]
            short = value if all(a is b for a, b in zip(parts, value, strict=True)) else parts
        else:
            return item
        return item if short is value else {**item, field: short}

    def _shorten_part(self, part: Any) -> Any:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            return self._shorten_field(part, "text")
        return part
