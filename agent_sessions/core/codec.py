"""Item codec: validate items and turn them into compact JSON text, and back.

orjson is used when installed (extra ``[fast]``); it encodes a typical item 5-10x faster than the
standard library (see ``benchmarks/bench_codec.py``). Both paths apply the same rules: an item is a
JSON object whose keys are strings, whose numbers are finite, and whose values are JSON types.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidItemError, ItemTooLargeError

_orjson: Any
try:  # pragma: no cover - exercised through whichever is installed
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None

DEFAULT_MAX_ITEM_BYTES = 16 * 1024 * 1024

_std_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _std_dumps(item: Any) -> str:
    return _std_encoder.encode(item)


def _orjson_dumps(item: Any) -> str:
    return str(_orjson.dumps(item).decode())


dumps: Callable[[Any], str] = _orjson_dumps if _orjson is not None else _std_dumps
"""Encode one value as compact JSON text (no validation beyond the library's own)."""

loads: Callable[[str | bytes], Any] = _orjson.loads if _orjson is not None else json.loads
"""Decode JSON text or UTF-8 bytes."""


def _find_problem(value: Any, path: str) -> str | None:
    """Return a description of the first non-JSON part of ``value``, or None."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}, which JSON cannot represent"
    if isinstance(value, Mapping):
        for key, sub in value.items():
            if not isinstance(key, str):
                return f"{path} has a non-string key {key!r}"
            problem = _find_problem(sub, f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        for i, sub in enumerate(value):
            problem = _find_problem(sub, f"{path}[{i}]")
            if problem:
                return problem
        return None
    return f"{path} is of type {type(value).__name__}, which is not JSON"


def _invalid(index: int, problem: str) -> InvalidItemError:
    return InvalidItemError(
        f"item {index} of the batch cannot be stored as JSON: {problem}; "
        "nothing of the batch was written",
        index=index,
    )


def encode_item(item: Any, index: int, max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES) -> str:
    """Validate one item of a batch and return its JSON text.

    Raises:
        InvalidItemError: the item is not a JSON object (message names ``index`` and the reason).
        ItemTooLargeError: its UTF-8 encoding is larger than ``max_item_bytes``.
    """
    if not isinstance(item, Mapping):
        raise InvalidItemError(
            f"item {index} of the batch is a {type(item).__name__}, not a JSON object (dict); "
            "nothing of the batch was written",
            index=index,
        )
    try:
        text = dumps(item)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _invalid(index, _find_problem(item, "item") or str(exc)) from exc
    # orjson writes NaN/Infinity as null, so walk only when a null appears; the standard
    # encoder turns int/None keys into strings and lets lone surrogates through, so always walk.
    if _orjson is None or "null" in text:
        problem = _find_problem(item, "item")
        if problem is None and _orjson is None:
            try:
                text.encode()
            except UnicodeEncodeError:
                problem = "a string holds a lone surrogate, which is not valid Unicode"
        if problem:
            raise _invalid(index, problem)
    # len(str) <= UTF-8 size <= 4 * len(str): encode only when the cheap bounds cannot decide.
    if len(text) > max_item_bytes or (
        4 * len(text) > max_item_bytes and len(text.encode()) > max_item_bytes
    ):
        raise ItemTooLargeError(
            f"item {index} of the batch is {len(text.encode())} bytes as JSON, above the limit of "
            f"{max_item_bytes} bytes (max_item_bytes); nothing of the batch was written",
            index=index,
        )
    return text


def encode_batch(items: Sequence[Any], max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES) -> list[str]:
    """Validate and encode a whole batch before anything is written."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InvalidItemError(
            f"add_items takes a list of items, got {type(items).__name__}; nothing was written"
        )
    return [encode_item(item, i, max_item_bytes) for i, item in enumerate(items)]


def decode_item(data: str | bytes) -> Any:
    """Decode stored JSON text; raises ``ValueError`` when it is not a JSON object."""
    value = loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"stored value is a {type(value).__name__}, not a JSON object")
    return value
