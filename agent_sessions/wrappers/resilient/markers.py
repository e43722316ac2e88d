"""Batch ids inside the items: how the primary tells that a batch was already applied.

Each item written through the resilient layer carries its batch's id under :data:`BATCH_KEY`.
A batch is stored all-or-nothing, so finding any of its items in the primary proves the whole
batch is there: a retry after an ambiguous failure (a timeout after the primary committed) and a
replay after a crash both look first and write only what is missing. The key is removed from
every item read through the layer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

BATCH_KEY = "_agent_sessions_batch"


def stamp(items: Iterable[Any]) -> tuple[str, list[Any]]:
    """A new batch id, and copies of ``items`` carrying it (items that are not dicts are left
    as they are; the codec refuses them anyway)."""
    batch_id = uuid.uuid4().hex
    return batch_id, [
        {**item, BATCH_KEY: batch_id} if isinstance(item, dict) else item for item in items
    ]


def strip(item: Any) -> Any:
    """``item`` without its batch id (the same object when it has none)."""
    if isinstance(item, dict) and BATCH_KEY in item:
        return {k: v for k, v in item.items() if k != BATCH_KEY}
    return item


def strip_all(items: list[Any]) -> list[Any]:
    """``items`` without batch ids (the same list when none has one)."""
    if not any(isinstance(item, dict) and BATCH_KEY in item for item in items):
        return items
    return [strip(item) for item in items]


def batch_of(item: Any) -> str | None:
    """The batch id ``item`` carries, if any."""
    value = item.get(BATCH_KEY) if isinstance(item, dict) else None
    return value if isinstance(value, str) else None
