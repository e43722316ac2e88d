"""Atomic history replacement on MongoDB without transactions (the SDK compaction hooks).

It commits with one write: the new batch document carries a ``swap`` field naming what it
replaces (``below: True``: every older document; ``drop``: ids of whole documents; ``shrink``:
``[id, lo, hi]``, keep items ``lo <= seq < hi``). Whoever meets a pending swap finishes it
(idempotently) and reads again. See docs/mongodb.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .driver import to_list

Row = tuple[int, str]


class Batches(Protocol):
    """What a swap uses of a ``MongoDBSession``."""

    session_id: str
    messages: Any

    def rows_of(
        self, doc: Any, after: int | None, before: int | None, tail: int | None = None
    ) -> list[Row]: ...

    def seq_n(self, doc: Any) -> tuple[int, int]: ...


SWAP = "swap"
SWAP_INDEX = "session_swaps"


async def plan(
    session: Batches, expected: list[Row], prune: Callable[[str], bool] | None
) -> dict[str, Any] | None:
    """The ``swap`` deleting the newest rows if they are exactly ``expected``, and the oldest
    rows ``prune`` accepts before them; None when the newest rows differ."""
    await finish_pending(session)  # else replaced rows still stored would be planned over
    live = {"session_id": session.session_id, "n": {"$gt": 0}}
    k = len(expected)
    docs = await to_list(
        session.messages.find(live, {"_id": 1, "seq": 1, "n": 1, "items": {"$slice": -k}})
        .sort("seq", -1)
        .limit(k)
    )
    rows: list[Row] = []
    used: list[Any] = []
    for doc in docs:
        rows[:0] = session.rows_of(doc, None, None, k - len(rows))
        used.append(doc)
        if len(rows) >= k:
            break
    if rows != expected:
        return None
    cut = expected[0][0]  # rows numbered >= cut go
    drop: list[Any] = []
    bounds: dict[Any, tuple[int, int, int]] = {}  # id -> (seq, end, kept end)
    for doc in used:
        seq, n = session.seq_n(doc)
        if seq >= cut:
            drop.append(doc["_id"])
        else:
            bounds[doc["_id"]] = (seq, seq + n, cut)
    start = 0  # rows numbered < start go
    if prune is not None:
        start, pruned = await _pruned(session, cut, prune)
        for doc in pruned:
            seq, n = session.seq_n(doc)
            end = bounds.get(doc["_id"], (seq, seq + n, seq + n))[2]
            if end <= start:
                drop.append(doc["_id"])
                bounds.pop(doc["_id"], None)
            else:
                bounds[doc["_id"]] = (seq, seq + n, end)
    shrink = [
        [doc_id, max(seq, start), kept_end]
        for doc_id, (seq, end, kept_end) in bounds.items()
        if max(seq, start) > seq or kept_end < end
    ]
    return {"drop": drop, "shrink": shrink}


async def _pruned(
    session: Batches, cut: int, prune: Callable[[str], bool]
) -> tuple[int, list[Any]]:
    """The number of the first row below ``cut`` that ``prune`` keeps (``cut`` if none), and
    the documents holding the rows before it, oldest first."""
    messages, sid = session.messages, session.session_id
    docs: list[Any] = []
    after = -1
    while True:
        page = await to_list(
            messages.find({"session_id": sid, "n": {"$gt": 0}, "seq": {"$gt": after, "$lt": cut}})
            .sort("seq", 1)
            .limit(16)
        )
        for doc in page:
            docs.append(doc)
            for seq, text in session.rows_of(doc, None, cut):
                if not prune(text):
                    return seq, docs
        if len(page) < 16:
            return cut, docs
        after = session.seq_n(page[-1])[0]


async def finish_pending(session: Batches) -> None:
    """Finish every swap of this session still pending (a partial index finds them)."""
    markers = await to_list(
        session.messages.find(
            {"session_id": session.session_id, SWAP: {"$exists": True}},
            {"_id": 1, "seq": 1, SWAP: 1},
        ).sort("seq", 1)
    )
    for marker in markers:
        await finish(session, marker)


async def finish(session: Batches, marker: Any) -> None:
    """Apply the deletions ``marker``'s swap names, then unset it (dropping the marker if it
    holds no items). Safe to repeat and to run concurrently."""
    messages, sid = session.messages, session.session_id
    spec = marker.get(SWAP) or {}
    if spec.get("below"):
        await messages.delete_many(
            {"session_id": sid, "seq": {"$lt": marker["seq"]}, "_id": {"$ne": marker["_id"]}}
        )
    if spec.get("drop"):
        await messages.delete_many({"session_id": sid, "_id": {"$in": spec["drop"]}})
    for doc_id, lo, hi in spec.get("shrink", []):
        await _shrink(session, doc_id, lo, hi)
    await messages.update_one({"_id": marker["_id"]}, {"$unset": {SWAP: ""}})
    await messages.delete_one({"_id": marker["_id"], "n": {"$lte": 0}, SWAP: {"$exists": False}})


async def _shrink(session: Batches, doc_id: Any, lo: int, hi: int) -> None:
    """Keep only the items numbered ``lo <= seq < hi`` of one batch document."""
    messages = session.messages
    for _ in range(8):
        doc = await messages.find_one({"_id": doc_id}, {"_id": 1, "seq": 1, "n": 1, "items": 1})
        if doc is None:
            return
        seq, n = session.seq_n(doc)
        kept = [text for s, text in session.rows_of(doc, None, None) if lo <= s < hi]
        if len(kept) == n:
            return
        guard = {"_id": doc_id, "seq": seq, "n": n}
        if kept:
            update = {"$set": {"seq": max(seq, lo), "n": len(kept), "items": kept}}
            if (await messages.update_one(guard, update)).matched_count:
                return
        elif (await messages.delete_one(guard)).deleted_count:
            return
        # A pop changed the document meanwhile: read it again.


__all__ = ["SWAP", "SWAP_INDEX", "finish", "finish_pending", "plan"]
