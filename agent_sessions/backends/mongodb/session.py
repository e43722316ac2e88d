"""MongoDB backend on PyMongo's native async API (``AsyncMongoClient``); Motor clients work too.

sessions: one counter document per session (``{_id, seq, created_at, updated_at}``, kept by
``clear_session``); messages: one document per ``add_items`` batch (``{session_id, seq: its first
number, n: items left, items: [JSON text]}``, unique on ``(session_id, seq)``), so every write is
atomic without a transaction. See docs/mongodb.md.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from agents.memory.session_settings import SessionSettings

from ...core.extras import missing

try:
    from pymongo import AsyncMongoClient, DeleteOne, InsertOne, ReturnDocument, UpdateMany
    from pymongo.driver_info import DriverInfo
    from pymongo.errors import BulkWriteError, ConfigurationError, DuplicateKeyError
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise missing("MongoDBSession", "mongodb", _exc) from _exc

from ...core.base import STORE_CAPABILITIES, BaseSession, Row, StoreOptions
from ...core.capabilities import Capability
from ...core.closing import Closing
from ...core.ids import validate_session_id
from ...core.options import explicit_options
from ...core.registry import StoreHold
from ...errors import (
    BackendDataError,
    BackendUnavailableError,
    ItemTooLargeError,
    SequenceConflictError,
)
from . import swap as swaps
from .driver import settled, to_list, translated

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("agent_sessions")

DEFAULT_DATABASE = "agent_sessions"
DEFAULT_SERVER_SELECTION_TIMEOUT_MS = 3000
"""Server selection timeout (ms) of clients made here unless the URI or client_kwargs set one."""

_DOCUMENT_LIMIT = 16 * 1024 * 1024  # MongoDB's maximum BSON document size
_DOCUMENT_OVERHEAD = 4096  # a 512-character session id (<= 2 KiB in UTF-8) and the other fields
_ITEM_OVERHEAD = 16  # one BSON array element: type byte, index key, length prefix, NUL
MAX_BATCH_BYTES = _DOCUMENT_LIMIT - _DOCUMENT_OVERHEAD
"""Largest batch (sum of UTF-8 JSON sizes plus 16 bytes per item) one ``add_items`` may store."""
DEFAULT_MAX_ITEM_BYTES = MAX_BATCH_BYTES - _ITEM_OVERHEAD
"""Default ``max_item_bytes``: the largest item a batch document can hold."""

_DRIVER_INFO = DriverInfo(name="agent_sessions")
_TAKEN = "at a number it had just reserved (the Agents SDK's format?)"
_MAX_TTL_SECONDS = 100 * 365.25 * 86400


COUNTER_GRACE = timedelta(days=1)
"""How much longer than its items a counter document lives under a TTL, so that numbers keep
growing when a session is written again after its items expired."""


def _counter_expiry(expiry: dict[str, Any]) -> dict[str, Any]:
    when = expiry.get("$set", {}).get("expires_at")
    return expiry if when is None else {"$set": {"expires_at": when + COUNTER_GRACE}}


def ttl_slack(ttl_seconds: float) -> float:
    """How much later than ``ttl_seconds`` after the last write documents may be deleted."""
    return max(60.0, ttl_seconds / 10)


def make_client(uri: str, **client_kwargs: Any) -> AsyncMongoClient[Any]:
    """Return a lazily connecting ``AsyncMongoClient`` for ``uri`` (server selection timeout
    :data:`DEFAULT_SERVER_SELECTION_TIMEOUT_MS` unless set). Raises ValueError for an invalid URI
    or option, BackendUnavailableError when a ``mongodb+srv://`` host does not resolve."""
    if "serverselectiontimeoutms" not in {k.lower() for k, _ in parse_qsl(urlsplit(uri).query)}:
        client_kwargs.setdefault("serverSelectionTimeoutMS", DEFAULT_SERVER_SELECTION_TIMEOUT_MS)
    client_kwargs.setdefault("driver", _DRIVER_INFO)
    try:
        return AsyncMongoClient(uri, **client_kwargs)
    except (ConfigurationError, ValueError) as exc:
        if isinstance(exc, ConfigurationError) and "DNS" in str(exc):  # mongodb+srv:// resolves
            raise BackendUnavailableError(f"cannot resolve the MongoDB host: {exc}") from exc
        raise ValueError(f"invalid MongoDB URI or client option: {exc}") from exc


_IndexKey = tuple[str, str, str, bool]
"""(database, sessions collection, messages collection, TTL indexes)."""


class _Indexes:
    """The indexes created on one client, and the creations under way."""

    def __init__(self) -> None:
        self.done: set[_IndexKey] = set()
        self.running: dict[_IndexKey, asyncio.Future[None]] = {}


_INDEXES: dict[int, tuple[weakref.ref[Any], _Indexes]] = {}


def _indexes_of(client: Any) -> _Indexes:
    """The record of ``client`` shared by all its stores (so indexes are created once per
    client); forgotten when the client is collected."""
    key = id(client)
    entry = _INDEXES.get(key)
    if entry is None:
        try:
            ref = weakref.ref(client, lambda _: _INDEXES.pop(key, None))
        except TypeError:  # not weak-referenceable: a record of this store's own
            return _Indexes()
        entry = _INDEXES[key] = (ref, _Indexes())
    return entry[1]


class MongoDBStore:
    """One MongoDB client and database. Each session opened on it (:meth:`session`) holds a
    share; the last to give its share back closes an owned client. Use :func:`open_store`."""

    def __init__(self, client: Any, owned: bool, database: str = DEFAULT_DATABASE) -> None:
        self.client = client
        self.owned = owned
        self.database = database
        self.users = 1
        self.close_pending = False  # the owned client's close failed or was cancelled
        self._lock = threading.Lock()
        self.indexes = _indexes_of(client)

    def session(self, session_id: str, **options: Any) -> MongoDBSession:
        """A session of this store holding a share of it until closed (``options`` as for
        :class:`MongoDBSession`, without the client and database)."""
        return MongoDBSession(
            session_id, client=self.client, database=self.database, _store=self.share(), **options
        )

    def catalog(self, **collections: Any) -> Any:
        """The catalog of the collections named by ``collection_prefix``,
        ``sessions_collection`` or ``messages_collection``."""
        return MongoDBSession(
            "catalog", client=self.client, database=self.database, **collections
        ).catalog_store()

    def share(self) -> MongoDBStore:
        """One user more (a session opened on this store)."""
        with self._lock:
            self.users += 1
        return self

    async def release(self) -> None:
        """One user fewer; the last closes an owned client."""
        with self._lock:
            self.users -= 1
            last = self.users == 0
        if last and self.owned:
            await self.close_client()

    async def close_client(self) -> None:
        """Close the owned client; may be called again after it failed."""
        self.close_pending = True
        await settled(self.client.close())  # a coroutine on PyMongo, plain on Motor
        self.close_pending = False

    async def ensure_indexes(self, key: _IndexKey, create: Callable[[], Awaitable[None]]) -> None:
        """Run ``create`` unless it completed for ``key`` on this client; concurrent callers in
        one loop share one run, which a cancelled caller does not stop."""
        if key in self.indexes.done:
            return
        future = self.indexes.running.get(key)
        if future is None or future.get_loop() is not asyncio.get_running_loop():
            future = self.indexes.running[key] = asyncio.ensure_future(create())
            future.add_done_callback(functools.partial(self._created, key))
        await asyncio.shield(future)

    def _created(self, key: _IndexKey, future: asyncio.Future[None]) -> None:
        if self.indexes.running.get(key) is future:
            del self.indexes.running[key]
        if not future.cancelled() and future.exception() is None:
            self.indexes.done.add(key)


class MongoDBSession(BaseSession):
    """A session stored in MongoDB.

    Args:
        session_id: the conversation's id.
        client: a ``pymongo.AsyncMongoClient`` (or a Motor ``AsyncIOMotorClient``) that your
            application manages; ``close()`` leaves it open. Use :meth:`from_uri` to let the
            session own a client.
        database: database name (default ``"agent_sessions"``).
        collection_prefix: collections are ``{prefix}sessions`` and ``{prefix}messages``.
        sessions_collection, messages_collection: explicit collection names (the SDK's
            arguments); they take precedence over ``collection_prefix``.
        session_settings, max_item_bytes, strict: see :class:`BaseSession`;
            ``max_item_bytes`` defaults to what one MongoDB document can hold.
    """

    capabilities = (STORE_CAPABILITIES - {Capability.COMMIT}) | {Capability.NATIVE_EXPIRY}
    """No COMMIT: without transactions a write cannot be made only while another session is
    unchanged (``core.commit.commit_by_api`` serves it; guarded writes decline)."""

    def __init__(
        self,
        session_id: str,
        *,
        client: Any,
        database: str = DEFAULT_DATABASE,
        collection_prefix: str = "",
        sessions_collection: str | None = None,
        messages_collection: str | None = None,
        _store: MongoDBStore | None = None,
        **options: Unpack[StoreOptions],
    ) -> None:
        super().__init__(session_id, **options)
        if client is None:
            raise TypeError(
                "MongoDBSession needs client=AsyncMongoClient(...); or use "
                "MongoDBSession.from_uri(session_id, uri='mongodb://...')"
            )
        if not database:
            raise ValueError("database must not be empty")
        self.database = database
        self.collection_prefix = collection_prefix
        self.sessions_collection = sessions_collection or f"{collection_prefix}sessions"
        self.messages_collection = messages_collection or f"{collection_prefix}messages"
        self.store = _store or MongoDBStore(client, owned=False, database=database)
        db = client[database]
        self.counters = db[self.sessions_collection]
        self.messages = db[self.messages_collection]
        self._ttl: float | None = None
        self._unset_expiry = False  # set_sliding_ttl(None) after a TTL: clear it at next write
        self._share_released = False

    @classmethod
    @explicit_options
    def from_uri(
        cls,
        session_id: str,
        *,
        uri: str,
        database: str | None = None,
        client_kwargs: dict[str, Any] | None = None,
        collection_prefix: str = "",
        sessions_collection: str | None = None,
        messages_collection: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        strict: bool = False,
    ) -> MongoDBSession:
        """Return a session owning a new client for ``uri`` (see :func:`make_client`);
        ``database`` defaults to the URI's, else ``"agent_sessions"``; the rest as in the
        constructor."""
        validate_session_id(session_id)
        store = _new_store(uri, database, client_kwargs)
        try:
            return cls(
                session_id,
                client=store.client,
                database=store.database,
                collection_prefix=collection_prefix,
                sessions_collection=sessions_collection,
                messages_collection=messages_collection,
                session_settings=session_settings,
                max_item_bytes=max_item_bytes,
                strict=strict,
                _store=store,
            )
        except BaseException:
            result = store.client.close()
            if inspect.iscoroutine(result):
                result.close()  # nothing connected yet: there is nothing to release
            raise

    @property
    def client(self) -> Any:
        """The MongoDB client this session uses."""
        return self.store.client

    def _member_options(self) -> dict[str, Any]:
        return {
            "client": self.store.client,
            "database": self.database,
            "sessions_collection": self.sessions_collection,
            "messages_collection": self.messages_collection,
            "_store": self.store.share(),
        }

    @property
    def _messages(self) -> Any:
        """The SDK's name for ``messages`` (its tests reach the collection through it)."""
        return self.messages

    def sibling(self, session_id: str) -> MongoDBSession:
        """A session of the same collections, client and expiry (the family's)."""
        member = super().sibling(session_id)
        member.set_sliding_ttl(self._ttl)
        return member

    def set_sliding_ttl(self, ttl_seconds: float | None) -> None:
        """Keep this session's documents ``ttl_seconds`` (up to :func:`ttl_slack` more) after
        each later write, by a TTL index; ``None`` removes the expiry at the next write."""
        if ttl_seconds is not None and (
            isinstance(ttl_seconds, bool)
            or not isinstance(ttl_seconds, (int, float))
            or not 0 < ttl_seconds <= _MAX_TTL_SECONDS
        ):
            raise ValueError(
                f"ttl_seconds must be a number of seconds above 0 and at most "
                f"{_MAX_TTL_SECONDS:.0f} (100 years), or None; got {ttl_seconds!r}"
            )
        if ttl_seconds is None:
            self._unset_expiry = self._unset_expiry or self._ttl is not None
            self._ttl = None
        else:
            self._ttl, self._unset_expiry = float(ttl_seconds), False

    async def ping(self) -> bool:
        """Return whether the server answers (the SDK's method)."""
        self._check_open()
        try:
            await self.store.client.admin.command("ping")
        except Exception:
            return False
        return True

    # -- the storage hooks -----------------------------------------------------------------

    async def _ensure_indexes(self) -> None:
        names = (self.database, self.sessions_collection, self.messages_collection)
        await self.store.ensure_indexes((*names, False), self._create_index)
        if self._ttl is not None:
            await self.store.ensure_indexes((*names, True), self._create_ttl_indexes)

    async def _create_index(self) -> None:
        async with translated("creating indexes"):
            await self.messages.create_index(
                [("session_id", 1), ("seq", 1)], unique=True, name="session_seq"
            )
            await self.messages.create_index(
                [("session_id", 1)],
                name=swaps.SWAP_INDEX,
                partialFilterExpression={swaps.SWAP: {"$exists": True}},
            )

    async def _create_ttl_indexes(self) -> None:
        async with translated("creating TTL indexes"):
            for collection in (self.messages, self.counters):
                await collection.create_index(
                    "expires_at", expireAfterSeconds=0, name="expires_at_ttl"
                )
            await self.messages.create_index(
                [("session_id", 1), ("expires_at", 1)], name="session_expires"
            )

    def _expiry(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The update setting (or, after the TTL was switched off, removing) the expiry of what
        a write touches, and the filter of the other documents due for it (``({}, {})``: none).
        A document gets ``now + ttl + slack``, rewritten only once that falls below ``now +
        ttl``: a few documents per write, never O(history)."""
        if self._ttl is not None:
            due = datetime.now(timezone.utc) + timedelta(seconds=self._ttl)
            when = due + timedelta(seconds=ttl_slack(self._ttl))
            return {"$set": {"expires_at": when}}, {"expires_at": {"$not": {"$gte": due}}}
        if self._unset_expiry:
            return {"$unset": {"expires_at": ""}}, {"expires_at": {"$exists": True}}
        return {}, {}

    async def refresh_expiry(self) -> None:
        """Extend the expiry of this session's documents as a write would (NATIVE_EXPIRY)."""
        self._check_open()
        expiry, stale = self._expiry()
        if expiry:
            await self._ensure_indexes()
            async with translated("refreshing expiry"):
                await self._refresh(expiry, [UpdateMany(self._sid(stale), expiry)])

    async def _refresh(self, expiry: dict[str, Any], writes: list[Any]) -> None:
        """Apply ``writes`` to the batches and ``expiry`` to the counter concurrently; the first
        error is raised once both are done."""
        updates = [self.counters.update_one({"_id": self.session_id}, _counter_expiry(expiry))]
        if writes:
            updates.append(self.messages.bulk_write(writes, ordered=False))
        for result in await asyncio.gather(*updates, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result
        self._unset_expiry = self._unset_expiry and "$unset" not in expiry

    async def _append(self, payloads: list[str], swap: dict[str, Any] | None = None) -> list[int]:
        """Store ``payloads`` as one batch document (with ``swap``: committing it)."""
        cost = 0
        for index, payload in enumerate(payloads):
            cost += len(payload.encode()) + _ITEM_OVERHEAD
            if cost > MAX_BATCH_BYTES:
                raise ItemTooLargeError(
                    f"the batch reaches {cost} bytes at item {index}, above the {MAX_BATCH_BYTES} "
                    "one MongoDB document holds; add these items in smaller batches (nothing "
                    "was written)",
                    index=index,
                )
        await self._ensure_indexes()
        expiry, stale = self._expiry()
        n = len(payloads)
        async with translated("adding items"):
            # An empty swap document still takes a number: (session_id, seq) is unique.
            first = await self._reserve(max(n, 1), expiry) - max(n, 1) + 1
            doc = {"session_id": self.session_id, "seq": first, "n": n, "items": payloads}
            doc.update(expiry.get("$set", {}))
            if swap is not None:
                doc[swaps.SWAP] = swap
            try:
                if expiry:  # the insert and the refresh of older batches in one round trip
                    writes = [InsertOne(doc), UpdateMany(self._sid(stale), expiry)]
                    await self.messages.bulk_write(writes, ordered=True)
                else:
                    await self.messages.insert_one(doc)
            except (DuplicateKeyError, BulkWriteError) as exc:
                if _is_duplicate(exc):
                    raise self._foreign(_TAKEN) from exc
                if (exc.details or {}).get("nInserted") != 1:
                    raise
                self._warn("batch stored, but refreshing older expiries failed", exc)
        self._unset_expiry = self._unset_expiry and "$unset" not in expiry
        return list(range(first, first + n))

    async def _write_at(self, rows: list[Row], created: float, updated: float) -> None:
        """One batch document per run of consecutive numbers; the counter is raised first (so
        no append takes these numbers), and inserted documents are deleted if a later fails."""
        expiry, _ = self._expiry()
        docs: list[dict[str, Any]] = []
        cost = 0
        for seq, payload in rows:
            size = len(payload.encode()) + _ITEM_OVERHEAD
            last = docs[-1] if docs else None
            if last is None or seq != last["seq"] + last["n"] or cost + size > MAX_BATCH_BYTES:
                last = {"session_id": self.session_id, "seq": seq, "n": 0, "items": []}
                last.update(expiry.get("$set", {}))
                docs.append(last)
                cost = 0
            last["items"].append(payload)
            last["n"] += 1
            cost += size
        await self._ensure_indexes()
        await self._finish_swaps()
        counter_set = {
            "created_at": datetime.fromtimestamp(created, timezone.utc),
            "updated_at": datetime.fromtimestamp(updated, timezone.utc),
            **_counter_expiry(expiry).get("$set", {}),
        }
        held = await self._count()
        if held:
            raise SequenceConflictError(
                f"session {self.session_id!r} already holds {held} item(s); "
                "write_sequenced_items fills an empty session only. Nothing was written"
            )
        async with translated("writing items at their numbers"):
            await self.counters.update_one(
                {"_id": self.session_id},
                {"$max": {"seq": rows[-1][0]}, "$set": counter_set},
                upsert=True,
            )
            try:
                await self.messages.insert_many(docs, ordered=True)
            except BaseException as exc:
                # only this call's documents (PyMongo gave each its _id before sending)
                await self.messages.delete_many(
                    {"_id": {"$in": [d["_id"] for d in docs if "_id" in d]}}
                )
                if _is_duplicate(exc):
                    raise self._foreign(_TAKEN) from exc
                raise
        self._unset_expiry = self._unset_expiry and "$unset" not in expiry

    async def _reserve(self, n: int, expiry: dict[str, Any]) -> int:
        """Take ``n`` numbers from the counter; the last of them."""
        now = datetime.now(timezone.utc)
        update = {
            **expiry,
            "$inc": {"seq": n},
            "$set": {"updated_at": now, **_counter_expiry(expiry).get("$set", {})},
            "$setOnInsert": {"created_at": now},
        }
        upsert = functools.partial(
            self.counters.find_one_and_update,
            {"_id": self.session_id},
            update,
            upsert=True,
            return_document=ReturnDocument.AFTER,
            projection={"seq": 1},
        )
        try:
            counter = await upsert()
        except DuplicateKeyError:  # two first writes upserted at once; the loser retries
            try:
                counter = await upsert()
            except DuplicateKeyError as exc:  # not that race: it matches the counter now
                raise BackendDataError(
                    f"the counter of session {self.session_id!r} in {self.database}."
                    f"{self.sessions_collection} hit a duplicate key twice ({exc}): that "
                    "collection has a unique index agent_sessions did not create (use another "
                    "database or collection_prefix), or the session is being erased while "
                    "written (try again). Nothing was written"
                ) from exc
        if not isinstance(counter, dict) or not isinstance(counter.get("seq"), int):
            raise BackendDataError(
                f"the counter document of session {self.session_id!r} in "
                f"{self.database}.{self.sessions_collection} has no integer 'seq'; that "
                "collection holds data agent_sessions did not write: use another collection"
            )
        return int(counter["seq"])

    def _sid(self, query: dict[str, Any] | None = None) -> dict[str, Any]:
        """The filter of this session's batch documents, narrowed by ``query``."""
        return {"session_id": self.session_id, **(query or {})}

    def _base_filter(self) -> dict[str, Any]:
        return self._sid({"n": {"$gt": 0}})

    def _read_filter(self) -> dict[str, Any]:
        """The batches a newest-first read must see: those holding items, and any document
        committing a swap (which may hold none)."""
        return self._sid({"$or": [{"n": {"$gt": 0}}, {swaps.SWAP: {"$exists": True}}]})

    def rows_of(
        self, doc: Any, after: int | None, before: int | None, tail: int | None = None
    ) -> list[Row]:
        """The rows of one batch document with after < seq < before; ``tail``: only its last
        ``tail`` items (its items were projected to those)."""
        items, (seq, n) = doc.get("items"), self.seq_n(doc)
        if not isinstance(items, list) or not all(isinstance(p, str) for p in items):
            raise self._foreign("whose items are no list of JSON text")
        if tail is not None:
            items = items[-tail:]
            seq += n - len(items)  # the first returned item's number
        lo = 0 if after is None else max(0, after + 1 - seq)
        hi = len(items) if before is None else min(len(items), before - seq)
        return [(seq + i, items[i]) for i in range(lo, hi)]

    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        await self._ensure_indexes()
        if before is not None:  # a bounded read may not reach a swap's document
            await self._finish_swaps()
        for _ in range(8):
            rows, swapping = await self._load_once(limit, after, before)
            if not swapping:
                return rows
            await self._finish_swaps()
        return rows

    async def _finish_swaps(self) -> None:
        async with translated("finishing a history replacement"):
            await swaps.finish_pending(self)

    async def _load_once(
        self, limit: int | None, after: int | None, before: int | None
    ) -> tuple[list[Row], bool]:
        """The rows, and whether a document committing a swap was among those read (the
        rows then mix the old and the new history: finish it and read again)."""
        query = self._base_filter() if before is not None else self._read_filter()
        query.update(_seq_range("$gt", after, before))
        projection: dict[str, Any] = {"_id": 0, "seq": 1, "n": 1, "items": 1, swaps.SWAP: 1}
        swapping = False
        async with translated("reading items"):
            # Each matching document holds a wanted item, so ``limit`` documents newest first
            # suffice, and without ``before`` only their last ``limit`` items travel.
            tail = limit if before is None else None
            sliced = projection if tail is None else {**projection, "items": {"$slice": -tail}}
            cursor = self.messages.find(query, sliced)
            if limit is None:
                cursor = cursor.sort("seq", 1)
            else:
                cursor = cursor.sort("seq", -1).limit(limit).batch_size(limit)
            chunks: list[list[Row]] = []
            got = 0
            try:
                async for doc in cursor:
                    swapping = swapping or swaps.SWAP in doc
                    want = None if tail is None else tail - got
                    chunks.append(self.rows_of(doc, None, before, want))
                    got += len(chunks[-1])
                    if limit is not None and got >= limit:
                        break
            finally:
                await settled(cursor.close())  # a coroutine on PyMongo, a future on Motor
            rows = [row for chunk in (chunks if limit is None else chunks[::-1]) for row in chunk]
            if after is not None and (limit is None or len(rows) < limit):
                # The batch that starts at or before ``after`` may still hold later items.
                straddler = await self.messages.find_one(
                    {**self._base_filter(), "seq": {"$lte": after}}, projection, sort=[("seq", -1)]
                )
                if straddler is not None:
                    rows[:0] = self.rows_of(straddler, after, before)
        if limit is not None and len(rows) > limit:
            rows = rows[-limit:]
        return rows, swapping

    async def _pop(self) -> str | None:
        await self._ensure_indexes()
        expiry, stale = self._expiry()
        async with translated("popping an item"):
            doc = await self._pop_newest(expiry)
            if doc is None:
                if expiry:
                    await self._refresh(expiry, [])
                return None
            items = doc.get("items")
            if not isinstance(items, list) or not items or not isinstance(items[-1], str):
                raise self._foreign("without items")
        # The item is ours now: what follows is housekeeping, and its failure must not turn a
        # completed pop into an error (the caller would lose the item).
        unused = {"_id": doc["_id"], "n": 0, swaps.SWAP: {"$exists": False}}
        drop = [DeleteOne(unused)] if doc.get("n") == 1 else []  # readers skip n == 0 meanwhile
        try:
            if swaps.SWAP in doc:  # took the last items of a replacement still being applied
                await self._finish_swaps()
            if expiry:
                await self._refresh(expiry, [*drop, UpdateMany(self._sid(stale), expiry)])
            elif drop:
                await self.messages.delete_one(unused)
        except Exception as exc:
            self._warn("popped an item, but cleaning up after it failed", exc)
        return items[-1]

    async def _pop_newest(self, expiry: dict[str, Any]) -> Any:
        """Take the newest item off the newest batch in one update; return that batch as it was
        (only its last item), or None when there is none."""
        for _ in range(8):
            doc = await self.messages.find_one_and_update(
                self._read_filter(),
                {**expiry, "$pop": {"items": 1}, "$inc": {"n": -1}},
                sort=[("seq", -1)],
                projection={"_id": 1, "n": 1, "items": {"$slice": -1}, swaps.SWAP: 1},
                return_document=ReturnDocument.BEFORE,
            )
            if doc is None or swaps.SWAP not in doc or doc.get("n", 0) > 0:
                return doc
            # The newest document commits a replacement but holds no item: what lies below it
            # may be replaced rows. Undo the decrement, finish the swap, then pop again.
            await self.messages.update_one({"_id": doc["_id"], "n": {"$lt": 0}}, {"$inc": {"n": 1}})
            await swaps.finish_pending(self)
        raise BackendUnavailableError(
            f"MongoDBSession {self.session_id!r}: a history replacement kept the newest batch "
            "busy through 8 attempts to pop; try again"
        )

    async def _clear(self) -> None:
        await self._ensure_indexes()
        expiry, _ = self._expiry()
        async with translated("clearing the session"):
            # The counter document stays, so numbers keep growing after a clear.
            await self.messages.delete_many(self._sid())
            if expiry:
                await self._refresh(expiry, [])

    async def _delete_before(self, before: int) -> int:
        """One atomic write per document, oldest first (what is gone is always a prefix); the
        straddling batch is trimmed by an update guarded on ``seq`` and ``n``, so the count is
        exact beside concurrent pops and purges. Leaves expiry alone."""
        await self._ensure_indexes()
        await self._finish_swaps()
        sid = self.session_id
        deleted = 0
        async with translated("deleting items"):
            while True:
                # The newest batch starting below ``before``: the only one that can straddle it.
                top = await self.messages.find_one(
                    {"session_id": sid, "seq": {"$lt": before}},
                    {"_id": 1, "seq": 1, "n": 1},
                    sort=[("seq", -1)],
                )
                if top is None:
                    return deleted
                seq, n = self.seq_n(top)
                whole_below = seq if seq + n > before else before
                while True:
                    gone = await self.messages.find_one_and_delete(
                        {"session_id": sid, "seq": {"$lt": whole_below}},
                        {"_id": 0, "seq": 1, "n": 1},
                        sort=[("seq", 1)],
                    )
                    if gone is None:
                        break
                    deleted += self.seq_n(gone)[1]
                if whole_below == before:
                    return deleted
                cut = before - seq
                trimmed = await self.messages.update_one(
                    {"_id": top["_id"], "seq": seq, "n": n},
                    {
                        "$set": {"seq": before},
                        "$inc": {"n": -cut},
                        "$push": {"items": {"$each": [], "$slice": cut - n}},  # keep the last
                    },
                )
                if trimmed.modified_count:
                    return deleted + cut
                # A pop or another purge changed that batch meanwhile: look again.

    async def _rewrite(self, rows: list[Row]) -> int:
        """One update per batch document, guarded on its ``seq`` and ``n`` (a pop or purge
        meanwhile makes it look again); a rewrite cut short can simply be run again."""
        await self._ensure_indexes()
        await self._finish_swaps()
        wanted = dict(rows)
        replaced = 0
        async with translated("rewriting items"):
            for _ in range(8):
                query = {**self._base_filter(), "seq": {"$lte": max(wanted)}}
                docs = [d async for d in self.messages.find(query, {"_id": 1, "seq": 1, "n": 1})]
                moved = False
                for doc in docs:
                    seq, n = self.seq_n(doc)
                    sets = {f"items.{s - seq}": wanted[s] for s in wanted if seq <= s < seq + n}
                    if not sets:
                        continue
                    done = await self.messages.update_one(
                        {"_id": doc["_id"], "seq": seq, "n": n}, {"$set": sets}
                    )
                    if done.matched_count:
                        replaced += len(sets)
                        for key in sets:
                            del wanted[seq + int(key.split(".", 1)[1])]
                    else:
                        moved = True
                if not moved or not wanted:
                    return replaced
        return replaced

    def seq_n(self, doc: Any) -> tuple[int, int]:
        """The ``seq`` and ``n`` of one batch document, checked."""
        seq, n = doc.get("seq"), doc.get("n")
        if type(seq) is not int or type(n) is not int:
            raise self._foreign("without integer 'seq' and 'n'")
        return seq, n

    def _warn(self, what: str, exc: BaseException) -> None:
        logger.warning("MongoDBSession %r: %s: %s", self.session_id, what, exc)

    def _foreign(self, what: str) -> BackendDataError:
        return BackendDataError(
            f"{self.database}.{self.messages_collection} holds a document for session "
            f"{self.session_id!r} {what}, which agent_sessions did not write; use another "
            "database or collection_prefix"
        )

    async def _replace_rows(
        self, expected: list[Row] | None, payloads: list[str], prune: Callable[[str], bool] | None
    ) -> bool:
        """The SDK compaction hook's swap (see ``swap``)."""
        await self._ensure_indexes()
        spec: dict[str, Any] | None
        async with translated("replacing the history"):
            spec = {"below": True} if expected is None else await swaps.plan(self, expected, prune)
        if spec is None:
            return False
        await self._append(payloads, spec)
        try:
            await self._finish_swaps()
        except BackendUnavailableError as exc:  # committed: the next reader finishes it
            self._warn("replaced the history; deleting the old items failed (reads finish it)", exc)
        return True

    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        await self._ensure_indexes()
        await self._finish_swaps()
        query = self._base_filter()
        async with translated("counting items"):
            lo: int | None = None
            if after is not None:
                straddler = await self.messages.find_one(
                    {**query, "seq": {"$lte": after}}, {"_id": 0, "seq": 1}, sort=[("seq", -1)]
                )
                lo = straddler["seq"] if straddler is not None else after + 1
            query.update(_seq_range("$gte", lo, before))
            # Items of each batch inside (after, before): min(end, before) - max(seq, after + 1).
            end: Any = {"$add": ["$seq", "$n"]}
            if before is not None:
                end = {"$min": [end, before]}
            start: Any = "$seq" if after is None else {"$max": ["$seq", after + 1]}
            inside = {"$max": [0, {"$subtract": [end, start]}]}
            pipeline = [{"$match": query}, {"$group": {"_id": None, "total": {"$sum": inside}}}]
            found = await to_list(self.messages.aggregate(pipeline))
        return int(found[0]["total"]) if found else 0

    def close(self) -> Closing:
        """Close the session (see :meth:`BaseSession.close`); if closing its own client failed,
        a later ``close()`` tries again, as the SDK's does."""
        if self._closing is not None and self._closing.failed and self.store.close_pending:
            self._closing = None
        return super().close()

    async def _close(self) -> None:
        if self._share_released:  # a retry: only the client's close is left to do
            if self.store.close_pending:
                await self.store.close_client()
            return
        self._share_released = True
        await self.store.release()

    def _owns_resources(self) -> bool:
        return self.store.owned  # the caller's own client: close() is a no-op, as the SDK's

    def catalog_store(self) -> Any:
        """Return the catalog of these collections (see ``agent_sessions.ops.catalog``)."""
        from .catalog import MongoCatalog

        return MongoCatalog(self.client[self.database], self.counters, self.messages)


def _seq_range(low: str, lo: int | None, before: int | None) -> dict[str, Any]:
    """The filter on ``seq`` from ``lo`` (by operator ``low``) up to ``before``; {} if none."""
    bounds = {op: v for op, v in ((low, lo), ("$lt", before)) if v is not None}
    return {"seq": bounds} if bounds else {}


def _is_duplicate(exc: BaseException) -> bool:
    if not isinstance(exc, BulkWriteError):
        return isinstance(exc, DuplicateKeyError)
    return any(e.get("code") == 11000 for e in exc.details.get("writeErrors", []))


def open_store(
    url: str, *, database: str | None = None, client_kwargs: dict[str, Any] | None = None
) -> StoreHold:
    """Open a store with a new client for ``url`` (arguments as in
    :meth:`MongoDBSession.from_uri`); ``await store.close()`` when done."""
    return StoreHold(_new_store(url, database, client_kwargs))


def _new_store(
    url: str, database: str | None, client_kwargs: dict[str, Any] | None
) -> MongoDBStore:
    client = make_client(url, **dict(client_kwargs or {}))
    if database is None:
        try:
            database = client.get_default_database().name
        except ConfigurationError:  # the URI names no database
            database = DEFAULT_DATABASE
    return MongoDBStore(client, owned=True, database=database)


def open_url(url: str, session_id: str, **options: Any) -> MongoDBSession:
    """``open_session`` entry for ``mongodb://`` and ``mongodb+srv://`` URLs; ``options``
    are :meth:`MongoDBSession.from_uri`'s."""
    return MongoDBSession.from_uri(session_id, uri=url, **options)


__all__ = [
    "DEFAULT_DATABASE",
    "DEFAULT_MAX_ITEM_BYTES",
    "DEFAULT_SERVER_SELECTION_TIMEOUT_MS",
    "MAX_BATCH_BYTES",
    "MongoDBSession",
    "MongoDBStore",
    "make_client",
    "open_store",
    "open_url",
]
