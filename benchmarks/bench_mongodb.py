"""MongoDB: ours vs raw PyMongo doing the same operations vs the SDK's MongoDBSession, in one run.

    python benchmarks/bench_mongodb.py --url mongodb://localhost:27017 [--quick]
    python benchmarks/bench_mongodb.py [--quick]        # no server: the in-process stand-in

Only a run against a real server (``--url`` or ``AGENT_SESSIONS_MONGODB_URL``) measures anything
that matters. Without one, every contender runs on mongomock-motor, an in-process imitation
that copies documents in Python and has no network, no storage engine and no indexes to speak
of: those numbers show Python-side overhead only, and their ratios say little about a server.
The tables are labelled with what they ran against.

The SDK's class needs two things the stand-in lacks (``client.append_metadata`` and
``collection.with_options``); on the stand-in they are supplied as no-ops, and its ``pop_item``
cannot run there at all (mongomock rejects its pipeline update), so it is left out of "pop".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from datetime import datetime, timezone
from typing import Any

from pymongo import AsyncMongoClient, ReturnDocument

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions.backends.mongodb import MongoDBSession
from benchmarks.harness import Contender, Scenario, default_scenarios, run_suite


class RawMongo:
    """The operations MongoDBSession sends, written directly against the client: a counter
    document per session and one document per batch, no validation, no cancellation shield."""

    def __init__(self, client: Any, database: str, prefix: str, session_id: str) -> None:
        db = client[database]
        self.counters, self.messages = db[f"{prefix}sessions"], db[f"{prefix}messages"]
        self.sid = session_id

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        n = len(items)
        counter = await self.counters.find_one_and_update(
            {"_id": self.sid},
            {"$inc": {"seq": n}, "$set": {"updated_at": datetime.now(timezone.utc)}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
            projection={"seq": 1},
        )
        await self.messages.insert_one(
            {
                "session_id": self.sid,
                "seq": counter["seq"] - n + 1,
                "n": n,
                "items": [json.dumps(i, separators=(",", ":")) for i in items],
            }
        )

    async def get_items(self, limit: int | None = None) -> list[Any]:
        query = {"session_id": self.sid, "n": {"$gt": 0}}
        projection: dict[str, Any] = {"_id": 0, "seq": 1, "n": 1, "items": 1}
        if limit is None:
            docs = [d async for d in self.messages.find(query, projection).sort("seq", 1)]
            return [json.loads(p) for d in docs for p in d["items"]]
        latest = {**projection, "items": {"$slice": -limit}}
        cursor = self.messages.find(query, latest).sort("seq", -1).limit(limit)
        docs = [d async for d in cursor.batch_size(limit)]
        payloads = [p for d in reversed(docs) for p in d["items"]][-limit:]
        return [json.loads(p) for p in payloads]

    async def pop_item(self) -> Any:
        doc = await self.messages.find_one_and_update(
            {"session_id": self.sid, "n": {"$gt": 0}},
            {"$pop": {"items": 1}, "$inc": {"n": -1}},
            sort=[("seq", -1)],
            projection={"_id": 1, "n": 1, "items": {"$slice": -1}},
            return_document=ReturnDocument.BEFORE,
        )
        if doc is None:
            return None
        if doc["n"] == 1:
            await self.messages.delete_one({"_id": doc["_id"], "n": 0})
        return json.loads(doc["items"][-1])

    async def clear_session(self) -> None:
        await self.messages.delete_many({"session_id": self.sid})


def _standin_client() -> Any:
    from mongomock_motor import AsyncMongoMockClient, AsyncMongoMockCollection

    class StandIn(AsyncMongoMockClient):  # type: ignore[misc,type-arg]
        def append_metadata(self, info: Any) -> None:
            """The SDK registers its driver name; nothing to do in-process."""

    def with_options(self: Any, **_: Any) -> Any:
        return self  # read preferences mean nothing in-process

    AsyncMongoMockCollection.with_options = with_options  # type: ignore[method-assign,assignment]
    return StandIn()


def _ttl_scenario(n: int) -> Scenario:
    async def op(s: Any, one: list[dict[str, Any]]) -> None:
        await s.add_items(one)

    return Scenario("add 1, sliding TTL @100", 100, op, n)


async def main(url: str | None, quick: bool) -> None:
    run = uuid.uuid4().hex[:8]
    database, prefix = "agent_sessions_bench", f"b{run}_"
    client: Any = AsyncMongoClient(url, serverSelectionTimeoutMS=3000) if url else _standin_client()
    where = "real server" if url else "STAND-IN mongomock-motor, NOT a server: numbers mean little"

    async def ours(sid: str) -> Any:
        return MongoDBSession(sid, client=client, database=database, collection_prefix=prefix)

    async def ours_ttl(sid: str) -> Any:
        s = await ours(sid)
        s.set_sliding_ttl(3600)
        return _OneByOne(s)

    async def ours_one_by_one(sid: str) -> Any:
        return _OneByOne(await ours(sid))

    raw_indexed = False

    async def raw(sid: str) -> Any:
        nonlocal raw_indexed
        session = RawMongo(client, database, f"raw{prefix}", sid)
        if not raw_indexed:  # the same unique index ours creates
            await session.messages.create_index([("session_id", 1), ("seq", 1)], unique=True)
            raw_indexed = True
        return session

    async def sdk(sid: str) -> Any:
        from agents.extensions.memory.mongodb_session import MongoDBSession as SDKMongoDBSession

        return SDKMongoDBSession(sid, client=client, database=f"{database}_sdk_{run}")

    big = 10_000 if quick else 100_000
    rounds = 2 if quick else 3
    scenarios = [s for s in default_scenarios(quick, big=big) if s.name != "pop"]
    contenders = [
        Contender("ours", ours),
        Contender("raw pymongo" if url else "raw (stand-in)", raw),
        Contender("SDK MongoDBSession", sdk),
    ]
    try:
        await run_suite(f"MongoDB ({where})", contenders, scenarios, rounds=rounds)
        pop = [s for s in default_scenarios(quick, big=big) if s.name == "pop"]
        pop_contenders = contenders if url else contenders[:2]
        await run_suite(f"MongoDB pop ({where})", pop_contenders, pop, rounds=rounds)
        n = 100 if quick else 500
        await run_suite(
            f"MongoDB sliding TTL cost, session of 100 batches ({where}): the extra indexed "
            "update_many per write (it matches nothing until an expiry comes due)",
            [Contender("ours + TTL", ours_ttl), Contender("ours, no TTL", ours_one_by_one)],
            [_ttl_scenario(n)],
            rounds=rounds,
        )
    finally:
        db = client[database]
        for name in await db.list_collection_names():
            if name.startswith((prefix, f"raw{prefix}")):
                await db.drop_collection(name)
        await client.drop_database(f"{database}_sdk_{run}")
        closing = client.close()
        if asyncio.iscoroutine(closing):
            await closing


class _OneByOne:
    """Prefills one item per batch (the harness adds 1000 at once) so each session holds 100
    batch documents; timed operations go straight to the session."""

    def __init__(self, session: MongoDBSession) -> None:
        self.session = session
        self.prefilled = False

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        if not self.prefilled and len(items) > 1:
            for i in items:
                await self.session.add_items([i])  # type: ignore[list-item]
            self.prefilled = True
            return
        await self.session.add_items(items)  # type: ignore[arg-type]

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await self.session.get_items(limit)

    async def pop_item(self) -> Any:
        return await self.session.pop_item()

    async def clear_session(self) -> None:
        await self.session.clear_session()

    async def close(self) -> None:
        await self.session.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=os.environ.get("AGENT_SESSIONS_MONGODB_URL"))
    parser.add_argument("--quick", action="store_true", help="fewer ops, 10k-item big session")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.quick))
