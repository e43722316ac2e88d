"""The rules of :attr:`Capability.TEXT_SEARCH` every backend shares: checking a query and its
filters, the words of a query, and the filters applied to a decoded item (for stores that
filter in Python)."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from .capabilities import TEXT_FIELD

_WORD = re.compile(r"\w+")
_FIELD = re.compile(r"[a-z_]{1,32}")

Equal = dict[str, tuple[str, ...]]
Between = dict[str, tuple["float | None", "float | None"]]


def query_words(query: str) -> list[str]:
    """The distinct words (``\\w+``) of ``query``, in order: never the store's query syntax."""
    return list(dict.fromkeys(_WORD.findall(query)))


def item_text(item: Any) -> str | None:
    """The indexed text of a decoded item: its top-level ``"text"`` when a non-empty string."""
    text = item.get(TEXT_FIELD) if isinstance(item, dict) else None
    return text if isinstance(text, str) and text else None


def _field(name: object, what: str) -> str:
    if not isinstance(name, str) or not _FIELD.fullmatch(name):
        raise ValueError(f"search_text: {what} field names are 1-32 of a-z and _, got {name!r}")
    return name


def _bound(value: object, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(
            f"search_text: between[{field!r}] bounds are numbers or None, got {value!r}"
        )
    return value


def check_search(
    query: object,
    limit: object,
    equal: Mapping[str, Collection[str]] | None,
    between: Mapping[str, tuple[float | None, float | None]] | None,
) -> tuple[list[str], Equal, Between]:
    """Check the arguments of ``search_text``; return the query's words and the filters as
    plain dicts. Raises ValueError for a bad field name, TypeError for a wrong type."""
    if not isinstance(query, str):
        raise TypeError(f"search_text: query must be a str, got {type(query).__name__}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"search_text: limit must be an int, got {limit!r}")
    equal_out: Equal = {}
    for name, values in (equal or {}).items():
        _field(name, "equal")
        if isinstance(values, (str, bytes)) or not isinstance(values, Collection):
            raise TypeError(
                f"search_text: equal[{name!r}] is a collection of strings (a list or set), "
                f"got {values!r}"
            )
        if not all(isinstance(v, str) for v in values):
            raise TypeError(f"search_text: equal[{name!r}] holds strings only, got {values!r}")
        equal_out[name] = tuple(dict.fromkeys(values))
    between_out: Between = {}
    for name, pair in (between or {}).items():
        _field(name, "between")
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"search_text: between[{name!r}] is (low, high), got {pair!r}")
        between_out[name] = (_bound(pair[0], name), _bound(pair[1], name))
    return query_words(query), equal_out, between_out


def passes(item: Any, equal: Equal, between: Between) -> bool:
    """Whether a decoded item passes the filters (top-level fields; strings for ``equal``,
    numbers but not booleans for ``between``, bounds inclusive)."""
    if not isinstance(item, dict):
        return False
    for name, values in equal.items():
        value = item.get(name)
        if not isinstance(value, str) or value not in values:
            return False
    for name, (low, high) in between.items():
        value = item.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if (low is not None and value < low) or (high is not None and value > high):
            return False
    return True


__all__ = ["Between", "Equal", "check_search", "item_text", "passes", "query_words"]
