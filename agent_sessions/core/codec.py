"""Item codec: validate items and turn them into compact JSON text, and back.

An item is a JSON object with string keys, finite numbers and JSON-typed values, on both paths:
orjson when installed (extra ``[fast]``, 5-10x faster), else the standard library. What orjson
accepts but ``json.dumps`` refuses is caught in C-speed passes; only a suspect item is walked in
Python, to name the bad part.
"""

from __future__ import annotations

import gc
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


MAX_DEPTH = 254
"""Deepest nesting of objects and arrays accepted in an item (orjson's limit, on both paths)."""


def _render(path: Any) -> str:
    keys: list[str] = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(f"[{key!r}]")
    return str(path) + "".join(reversed(keys))


_PLAIN = frozenset({str, bool, type(None)})
_CONTAINERS = frozenset({dict, list, tuple})


def _find_problem(value: Any, path: str) -> str | None:
    """Describe the first part of ``value`` that ``json.dumps`` refuses or that is no 64-bit
    int or finite float, or return None (iterative: deep nesting is reported, not raised)."""
    stack: list[tuple[Any, Any, int]] = [(value, path, 1)]
    pop, push = stack.pop, stack.append
    plain, containers = _PLAIN, _CONTAINERS
    while stack:
        current, where, depth = pop()
        kind = type(current)
        if kind in plain:
            continue
        if kind is dict or (kind not in containers and isinstance(current, dict)):
            if depth > MAX_DEPTH:
                return f"{path} is nested deeper than {MAX_DEPTH} levels"
            for key, sub in current.items():
                if type(key) is not str and not isinstance(key, str):
                    return f"{_render(where)} has a non-string key {key!r}"
                if type(sub) not in plain:
                    push((sub, (where, key), depth + 1))
        elif kind is list or kind is tuple or isinstance(current, (list, tuple)):
            if depth > MAX_DEPTH:
                return f"{path} is nested deeper than {MAX_DEPTH} levels"
            for i, sub in enumerate(current):
                if type(sub) not in plain:
                    push((sub, (where, i), depth + 1))
        elif isinstance(current, int):
            if not -(2**63) <= current < 2**64:
                return f"{_render(where)} is an integer outside the 64-bit range JSON tools read"
        elif isinstance(current, float):
            if not math.isfinite(current):
                return f"{_render(where)} is {current!r}, which JSON cannot represent"
        elif not isinstance(current, str):
            return f"{_render(where)} is of type {kind.__name__}, which is not JSON"
    return None


def _invalid(index: int, problem: str) -> InvalidItemError:
    return InvalidItemError(
        f"item {index} of the batch cannot be stored as JSON: {problem}; "
        "nothing of the batch was written",
        index=index,
    )


_EXACT_JSON = frozenset({dict, list, tuple, str, int, float, bool, type(None)})
_DICT = {dict}


def _orjson_wrote_json(items: Sequence[Any], data: list[bytes]) -> bool:
    """True when ``data``, orjson's texts for the dicts ``items``, are what ``json.dumps``
    would write: every value of an exact JSON type (orjson writes UUID, datetime...) and, with
    floats, no more ``null`` than None values (orjson writes NaN as ``null``). One C call
    (``gc.get_referents``) per level of the batch."""
    level: Sequence[Any] = items
    nones, floats = 0, False
    while level:
        level = gc.get_referents(*level)
        kinds = set(map(type, level))
        if not kinds <= _EXACT_JSON:
            return False
        floats = floats or float in kinds
        nones += level.count(None)
        if _CONTAINERS.isdisjoint(kinds):
            break
    return not floats or nones == sum(d.count(b"null") for d in data)


def _encode_text(item: Any, index: int) -> str:
    """Validate ``item`` and return its JSON text (the rules in the module docstring)."""
    if _orjson is not None:
        try:
            data = _orjson.dumps(item)
        except TypeError:
            pass  # orjson refuses (non-string key, 64-bit range, depth...): the walk says why
        else:
            if not (type(item) is dict and _orjson_wrote_json([item], [data])) and (
                problem := _find_problem(item, "item")
            ):
                raise _invalid(index, problem)
            return str(data.decode())
    problem = _find_problem(item, "item")
    if problem:
        raise _invalid(index, problem)
    # No orjson, or JSON that orjson refuses (a float or tuple subclass, a str subclass as a key).
    try:
        text = _std_dumps(item)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise _invalid(index, str(exc)) from exc
    try:  # the standard encoder lets lone surrogates through; orjson refuses them itself
        text.encode()
    except UnicodeEncodeError:
        raise _invalid(
            index, "a string holds a lone surrogate, which is not valid Unicode"
        ) from None
    return text


def encode_item(item: Any, index: int, max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES) -> str:
    """Validate one item of a batch and return its JSON text.

    Raises:
        InvalidItemError: the item is not a JSON object (message names ``index`` and the reason).
        ItemTooLargeError: its UTF-8 encoding is larger than ``max_item_bytes``.
    """
    if type(item) is not dict and not isinstance(item, Mapping):  # the ABC check costs ~0.3 us
        raise InvalidItemError(
            f"item {index} of the batch is a {type(item).__name__}, not a JSON object (dict); "
            "nothing of the batch was written",
            index=index,
        )
    return check_size(_encode_text(item, index), index, max_item_bytes)


def check_size(text: str, index: int, max_item_bytes: int) -> str:
    """Return the JSON text of item ``index`` of a batch if it fits ``max_item_bytes``.

    Raises:
        ItemTooLargeError: its UTF-8 encoding is larger (the message names both).
    """
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
    if type(items) is not list and (
        isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence)
    ):
        raise InvalidItemError(
            f"add_items takes a list of items, got {type(items).__name__}; nothing was written"
        )
    if _orjson is not None and len(items) > 1 and set(map(type, items)) == _DICT:
        # A common batch in a few C calls; any doubt takes the per-item path, which names it.
        try:
            data = list(map(_orjson.dumps, items))
        except TypeError:
            pass
        else:
            if max(map(len, data)) <= max_item_bytes and _orjson_wrote_json(items, data):
                return [d.decode() for d in data]
    return [encode_item(item, i, max_item_bytes) for i, item in enumerate(items)]


def decode_item(data: str | bytes) -> Any:
    """Decode stored JSON text; raises ``ValueError`` when it is not a JSON object."""
    value = loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"stored value is a {type(value).__name__}, not a JSON object")
    return value
