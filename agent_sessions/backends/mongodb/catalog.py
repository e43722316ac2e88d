"""The catalog of one MongoDB sessions/messages collection pair.

Sessions are the counter documents (``_id`` = session id, ``created_at``, ``updated_at``), read
in ``_id`` order through the ``_id`` index; item counts come from one aggregation over the page's
batch documents (summing their ``n``), so no item is read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ...core.catalog import CatalogQuery, SessionInfo, family_root, group_families, utc
from ...core.ids import SIBLING_MARK
from .driver import to_list, translated


def _naive(when: datetime) -> datetime:
    # Stored times are naive UTC (the driver's default); compare like with like.
    return when.astimezone(timezone.utc).replace(tzinfo=None)


class MongoCatalog:
    """Lists and deletes the sessions of one database's collection pair."""

    def __init__(self, database: Any, counters: Any, messages: Any) -> None:
        self.database = database
        self.counters = counters
        self.messages = messages

    async def exists(self) -> bool:
        async with translated("listing collections"):
            names = await self.database.list_collection_names()
        return self.counters.name in names

    async def list_page(self, query: CatalogQuery) -> list[SessionInfo]:
        conditions: list[dict[str, Any]] = []
        if query.after is not None:
            conditions.append({"_id": {"$gt": query.after}})
        if query.prefix:
            conditions.append({"_id": {"$regex": "^" + re.escape(query.prefix)}})
        if not query.internal:
            conditions.append({"_id": {"$not": re.compile("^" + SIBLING_MARK)}})
        if query.updated_after is not None:
            conditions.append({"updated_at": {"$gte": _naive(query.updated_after)}})
        if query.updated_before is not None:
            conditions.append({"updated_at": {"$lt": _naive(query.updated_before)}})
        flt = {"$and": conditions} if conditions else {}
        async with translated("listing sessions"):
            docs = await to_list(
                self.counters.find(flt, {"created_at": 1, "updated_at": 1})
                .sort("_id", 1)
                .limit(query.limit)
            )
            ids = [d["_id"] for d in docs]
            match = {"$match": {"session_id": {"$in": ids}, "n": {"$gt": 0}}}
            group = {"$group": {"_id": "$session_id", "total": {"$sum": "$n"}}}
            totals = await to_list(self.messages.aggregate([match, group])) if ids else []
            counts = {row["_id"]: int(row["total"]) for row in totals}
        return [
            SessionInfo(
                str(d["_id"]),
                utc(d.get("created_at")),
                utc(d.get("updated_at")),
                counts.get(d["_id"], 0),
            )
            for d in docs
        ]

    async def _side_ids(self, match: dict[str, Any]) -> list[str]:
        """The ids of the side stores whose ``_id`` matches ``match``."""
        async with translated("listing side stores"):
            docs = await to_list(self.counters.find({"_id": match}, {"_id": 1}))
        return [str(d["_id"]) for d in docs]

    async def family_ids(self, session_id: str) -> list[str]:
        pattern = f"^{SIBLING_MARK}.*{SIBLING_MARK}{re.escape(session_id)}$"
        ids = await self._side_ids({"$regex": pattern, "$options": "s"})
        return [sid for sid in ids if family_root(sid) == session_id]

    async def families(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        return group_families(await self._side_ids({"$regex": f"^{SIBLING_MARK}"}), session_ids)

    async def delete(self, session_ids: Sequence[str]) -> int:
        ids = list(session_ids)
        if not ids:
            return 0
        async with translated("deleting sessions"):
            await self.messages.delete_many({"session_id": {"$in": ids}})
            result = await self.counters.delete_many({"_id": {"$in": ids}})
        return int(result.deleted_count)
