"""Redis backend on ``redis.asyncio``: standalone Redis or Redis Cluster, one round trip per call.

Each session is two keys (see ``layout``); every write is one Lua script or one command, so it
is atomic; ``get_items(limit)`` is one ZRANGE. An unreachable or silent Redis raises
:class:`BackendUnavailableError`, and the session works again once Redis is back.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeGuard, TypeVar

from ...core.extras import missing

try:
    from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import (
        AuthenticationError,
        BusyLoadingError,
        ClusterError,
        MaxConnectionsError,
        OutOfMemoryError,
        ReadOnlyError,
        RedisClusterException,
        ResponseError,
        TryAgainError,
    )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise missing("RedisSession", "redis", _exc) from _exc

from agents.memory.session_settings import SessionSettings

from ...core.base import STORE_CAPABILITIES, BaseSession, Row, StoreOptions, one_guarded
from ...core.capabilities import Capability
from ...core.codec import DEFAULT_MAX_ITEM_BYTES, encode_item
from ...core.family import SharedMembers
from ...core.options import explicit_options
from ...core.registry import StoreHold
from ...errors import (
    BackendDataError,
    BackendUnavailableError,
    CommitConflictError,
    SequenceConflictError,
)
from . import layout
from .layout import ITEMS_TYPE, META_TYPE, check_key_prefix, session_keys

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0
"""Seconds ``from_url``'s client waits to connect or for an answer (redis-py's default too)."""

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    RedisConnectionError,  # includes BusyLoadingError, AuthenticationError, MaxConnectionsError
    RedisTimeoutError,
    ClusterError,  # includes ClusterDownError, MasterDownError
    RedisClusterException,  # no reachable node, slot not covered
    TryAgainError,
    ReadOnlyError,
    OutOfMemoryError,
    OSError,
)
_NEWEST_BYTES = 64 * 1024  # the largest member kept as the guess of a checked pop


def _is_int(text: str | bytes) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _member(seq: int, text: str | bytes) -> str | bytes:
    """The sorted-set member of item ``seq`` (bytes for a bytes client's rows)."""
    return f"{seq}:{text}" if isinstance(text, str) else b"%d:%s" % (seq, text)


def _pairs(rows: list[Row]) -> list[str]:
    """seq1, json1, seq2, json2, ... as WRITE_AT and REWRITE take them."""
    return [part for seq, payload in rows for part in (str(seq), payload)]


def _bounds(after: int | None, before: int | None) -> tuple[str, str]:
    """The exclusive score range (after, before) as ZRANGEBYSCORE takes it."""
    return (
        "-inf" if after is None else f"({after}",
        "+inf" if before is None else f"({before}",
    )


class NewestMembers:
    """Each session's newest member as last written or read through one client in this
    process: a checked pop's guess (the server checks it, so a stale one costs a round trip),
    kept as long as the client lives, so that a fresh object per request pops in one. At most
    ``budget`` characters of members, the longest-unchanged dropped first; none longer than
    ``_NEWEST_BYTES``."""

    _of: ClassVar[weakref.WeakKeyDictionary[Any, NewestMembers]] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, client: Redis | RedisCluster) -> NewestMembers:
        """The guesses kept for ``client`` (they hold no reference to it)."""
        found = cls._of.get(client)
        if found is None:
            found = cls._of[client] = cls()
        return found

    def __init__(self, budget: int = 4 * 1024 * 1024) -> None:
        self._members: dict[str, str | bytes] = {}
        self._size = 0
        self._budget = budget

    @property
    def size(self) -> int:
        """Characters of members kept."""
        return self._size

    def get(self, key: str) -> str | bytes | None:
        return self._members.get(key)

    def note(self, key: str, member: str | bytes | None) -> None:
        """Remember ``member`` as ``key``'s newest (None: forget it)."""
        members = self._members
        old = members.pop(key, None)
        if old is not None:
            self._size -= len(old)
        if member is None or len(member) > _NEWEST_BYTES:
            return
        members[key] = member
        self._size += len(member)
        while self._size > self._budget:
            self._size -= len(members.pop(next(iter(members))))


class RedisStore:
    """One Redis client (its connection pool), shared by the stores opened from one URL and
    options in one event loop; the last user closes an owned client. Use :func:`open_store`."""

    _by_url: ClassVar[dict[tuple[Any, ...], RedisStore]] = {}
    _by_client: ClassVar[weakref.WeakValueDictionary[int, RedisStore]] = (
        weakref.WeakValueDictionary()
    )
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        client: Redis | RedisCluster,
        owned: bool,
        key: tuple[Any, ...] | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        self.client = client
        self.owned = owned
        self.users = 1
        self.key = key
        self.timeout = timeout
        self.members = SharedMembers()
        self.newest = NewestMembers.of(client)

    @classmethod
    def of_client(cls, client: Redis | RedisCluster) -> RedisStore:
        """The store of a caller's own ``client`` (never closed here), one user more: shared
        by the sessions built on that client while any of them lives."""
        with cls._lock:
            store = cls._by_client.get(id(client))
            if store is None or store.client is not client:
                store = cls._by_client[id(client)] = cls(client, owned=False)
            else:
                store.users += 1
            return store

    @classmethod
    def for_url(
        cls, url: str, redis_kwargs: dict[str, Any] | None, cluster: bool, timeout: float | None
    ) -> RedisStore:
        """The running loop's shared store for these arguments, one user more; outside a
        loop, a store of its own."""

        def build() -> Redis | RedisCluster:
            # No retries: a retried write may run twice; fail and let the caller decide.
            defaults = {"socket_connect_timeout": timeout, "socket_timeout": timeout}
            options = {"retry": Retry(NoBackoff(), 0), **defaults, **(redis_kwargs or {})}
            if cluster:
                return RedisCluster.from_url(url, **options)
            # redis-py's blocking pool waits up to timeout for a free connection, then raises.
            return Redis.from_pool(BlockingConnectionPool.from_url(url, timeout=timeout, **options))

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to tie the pool to
            return cls(build(), owned=True, timeout=timeout)
        key = (url, repr(sorted((redis_kwargs or {}).items())), cluster, timeout, loop)
        with cls._lock:
            store = cls._by_url.get(key)
            if store is not None:
                store.users += 1
                return store
            store = cls._by_url[key] = cls(build(), owned=True, key=key, timeout=timeout)
            return store

    def session(self, session_id: str, **options: Any) -> RedisSession:
        """A session holding a share of this store until closed (``options`` as for
        :class:`RedisSession`, without the client)."""
        options.setdefault("timeout", self.timeout)
        return RedisSession(session_id, _store=self.share(), **options)

    def catalog(self, key_prefix: str = "agent_sessions") -> Any:
        """The catalog of the sessions under ``key_prefix`` (see ``agent_sessions.ops.catalog``)."""
        return RedisSession(
            "catalog", client=self.client, key_prefix=key_prefix, timeout=self.timeout
        ).catalog_store()

    def share(self) -> RedisStore:
        """One user more (a session opened on this store)."""
        with self._lock:
            self.users += 1
        return self

    def forget(self) -> bool:
        """One user fewer, without closing anything; True for the last."""
        with self._lock:
            self.users -= 1
            if self.users:
                return False
            if self.key is not None and self._by_url.get(self.key) is self:
                del self._by_url[self.key]
            return True

    async def release(self) -> None:
        """One user fewer; the last closes an owned client."""
        if self.forget() and self.owned:
            await self.client.aclose()


def _read_range(
    target: Any, key: str, limit: int | None, after: int | None, before: int | None
) -> Any:
    """Send (or queue on a pipeline) ``_load``'s read; with a limit and a bound, newest first."""
    if after is None and before is None:
        return target.zrange(key, 0 if limit is None else -limit, -1)
    low, high = _bounds(after, before)
    if limit is None:
        return target.zrangebyscore(key, low, high)
    return target.zrevrangebyscore(key, high, low, start=0, num=limit)


def _parse_rows(members: list[Any], key: str, key_prefix: str) -> list[Row]:
    """Sorted-set members ``"<seq>:<json>"`` as (seq, json) rows (bytes stay bytes)."""
    if not members:
        return []
    sep = b":" if isinstance(members[0], bytes) else ":"
    parts = (m.partition(sep) for m in members)
    try:
        return [(int(head), payload) for head, _, payload in parts]
    except ValueError:
        # Where, not what: the member is stored content and may reach logs and spans.
        at = next(i for i, m in enumerate(members) if not _is_int(m.partition(sep)[0]))
        raise BackendDataError(
            f"Redis key {key!r} holds a member that agent_sessions did not write "
            f"(member {at} of the {len(members)} read, oldest first); is another application "
            f"using key_prefix {key_prefix!r}? Choose another prefix or remove the key."
        ) from None


def _describe(client: Any) -> str:
    if isinstance(client, RedisCluster):
        nodes = client.get_nodes() or list(client.nodes_manager.startup_nodes.values())
        return f"Redis Cluster ({', '.join(n.name for n in nodes) or 'no known node'})"
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if "path" in kwargs:
        return f"Redis at unix:{kwargs['path']}"
    return f"Redis at {kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


class RedisSession(BaseSession):
    """A session stored in Redis or Redis Cluster.

    Args:
        session_id: the conversation's id (any characters; see ``layout`` for keys).
        client: a ``redis.asyncio.Redis`` or ``RedisCluster`` (``decode_responses`` either way).
            The session never closes it. ``redis_client`` is accepted as an alias (the SDK's name).
        key_prefix: start of every key; must not contain braces.
        ttl: seconds (to the ms) after each write when the session's keys expire; None: never.
        timeout: seconds a call waits for a free pooled connection before raising
            BackendUnavailableError (None: no limit); the client's own socket timeouts bound
            connecting and answering.
        session_settings, max_item_bytes, strict: see :class:`BaseSession`.

    Note: redis-py retries a command after a connection error by default, so a write may run
    twice. :meth:`from_url` turns that off; for your own client pass ``retry=Retry(NoBackoff(),
    0)`` if a lost reply must never duplicate a batch or drop a pop.
    """

    capabilities = STORE_CAPABILITIES | {Capability.NATIVE_EXPIRY}
    # Each write is one command: a cancelled caller sent none, part (which Redis discards) or
    # all of it (which Redis runs whole), so no task is needed to see a write through.
    _single_dispatch_writes = True

    def __init__(
        self,
        session_id: str,
        *,
        client: Redis | RedisCluster | None = None,
        redis_client: Redis | RedisCluster | None = None,
        key_prefix: str = "agent_sessions",
        ttl: float | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        _store: RedisStore | None = None,
        **options: Unpack[StoreOptions],
    ) -> None:
        super().__init__(session_id, **options)
        if _store is None:
            if (client is None) == (redis_client is None):
                raise TypeError(
                    "RedisSession needs exactly one of client= or redis_client= (a "
                    "redis.asyncio.Redis or RedisCluster); or use RedisSession.from_url(...)"
                )
            _store = RedisStore.of_client(client or redis_client)  # type: ignore[arg-type]
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds or None: {timeout!r}")
        self.store = _store
        self._client: Any = _store.client
        self._cluster = isinstance(_store.client, RedisCluster)
        if self._cluster:  # sessions live in different slots: no script reaches two of them
            vars(self)["capabilities"] = type(self).capabilities - {Capability.COMMIT}
        self.key_prefix = check_key_prefix(key_prefix)
        self.timeout = timeout
        self.keys = session_keys(self.key_prefix, self.session_id)  # (items, meta)
        self.ttl: float | None = None
        self.ttl_ms = "0"  # as the scripts take it ("0": no expiry)
        self.set_sliding_ttl(ttl)

    @classmethod
    @explicit_options
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        redis_kwargs: dict[str, Any] | None = None,
        cluster: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        key_prefix: str = "agent_sessions",
        ttl: float | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
        strict: bool = False,
    ) -> RedisSession:
        """Open ``session_id`` on a client made from ``url``, shared by the sessions opened in
        one event loop with the same arguments below (the last to close closes it).

        Args:
            url: ``redis://[user:pass@]host:port/db``, ``rediss://`` (TLS) or ``unix://``.
            redis_kwargs: passed to ``redis.asyncio.from_url`` / ``RedisCluster.from_url``
                (e.g. ``decode_responses``, ``ssl_ca_certs``, ``max_connections``).
            cluster: connect with ``RedisCluster`` (url names any one node).
            timeout: the client's ``socket_connect_timeout`` and ``socket_timeout`` (seconds;
                None: no limit), and the wait for a free pooled connection (the client is
                built on redis-py's ``BlockingConnectionPool``, except on a cluster).
            key_prefix, ttl, session_settings, max_item_bytes, strict: as in the constructor.
        """
        store = RedisStore.for_url(url, redis_kwargs, cluster, timeout)
        try:
            return cls(
                session_id,
                _store=store,
                timeout=timeout,
                key_prefix=key_prefix,
                ttl=ttl,
                session_settings=session_settings,
                max_item_bytes=max_item_bytes,
                strict=strict,
            )
        except BaseException:
            store.forget()
            raise

    # -- capabilities ----------------------------------------------------------------------

    def store_key(self) -> tuple[Any, ...] | None:
        """(server, database, key) of this session's items; None on a cluster."""
        where = getattr(getattr(self._client, "connection_pool", None), "connection_kwargs", None)
        if self._cluster or not isinstance(where, dict):
            return None
        server = (where.get("host"), where.get("port"), where.get("path"), where.get("db", 0))
        return ("redis", *server, self.keys[0])

    def _shared_members(self) -> tuple[SharedMembers, dict[str, Any]]:
        # The expiry too: native expiry applies to the whole family.
        return self.store.members, {
            "key_prefix": self.key_prefix,
            "ttl": self.ttl,
            "timeout": self.timeout,
            "_store": self.store,
        }

    def _member_options(self) -> dict[str, Any]:
        return {**self._shared_members()[1], "_store": self.store.share()}

    def set_sliding_ttl(self, ttl_seconds: float | None) -> None:
        """Make every later write set this session's keys to expire ``ttl_seconds`` after it;
        None stops setting expiry."""
        if ttl_seconds is None:
            self.ttl, self.ttl_ms = None, "0"
            return
        if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, (int, float)):
            raise TypeError(f"ttl must be a number of seconds or None, got {ttl_seconds!r}")
        if not 0.001 <= ttl_seconds < float("inf"):  # also NaN
            raise ValueError(f"ttl must be a finite number >= 0.001 seconds, got {ttl_seconds!r}")
        # Exact for an int (the SDK's type); Redis takes at most 2**63-1 ms from now.
        ttl_ms = ttl_seconds * 1000 if isinstance(ttl_seconds, int) else round(ttl_seconds * 1000)
        if ttl_ms > 2**63 - 1:
            raise ValueError(
                f"ttl {ttl_seconds!r} s is past the end of Redis's expiry range (2**63-1 ms)"
            )
        self.ttl, self.ttl_ms = ttl_seconds, str(ttl_ms)

    async def refresh_expiry(self) -> None:
        """Set this session's keys to expire ``ttl`` from now, as a write would (NATIVE_EXPIRY)."""
        self._check_open()
        if self.ttl is not None:
            await self._script(layout.TOUCH)

    # -- public helpers ----------------------------------------------------------------------

    @property
    def client(self) -> Redis | RedisCluster:
        """The redis.asyncio client this session uses."""
        return self.store.client

    async def ping(self) -> bool:
        """Return whether Redis answers within ``timeout`` (the SDK's method)."""
        self._check_open()
        try:
            return bool(await self._call(self._client.ping, reads=True))
        except BackendUnavailableError:
            return False

    def catalog_store(self) -> Any:
        """Return the catalog of this key prefix (see ``agent_sessions.ops.catalog``)."""
        from .catalog import RedisCatalog

        return RedisCatalog(self._call, self.client, self.key_prefix)

    # -- BaseSession hooks -----------------------------------------------------------------------

    async def _append(self, payloads: list[str]) -> list[int]:
        return self._appended(payloads, await self._script(layout.APPEND, *payloads))

    async def _append_family(self, writes: list[tuple[BaseSession, list[str]]]) -> list[list[int]]:
        # One script over every batch's keys (and the registry's, to list a side store first).
        near = [s for s, _ in writes if self._near(s)]
        if len(writes) < 2 or len(near) < len(writes):
            return await super()._append_family(writes)
        keys: list[str] = []
        args: list[Any] = [len(writes)]
        for s, (_, payloads) in zip(near, writes, strict=True):
            keys += s.keys
            args += [s.ttl_ms, len(payloads), *payloads]
        listing: RedisSession | None = None
        for batch, s in enumerate(near, 1):
            if s.unlisted is None:
                continue
            registry, purpose = s.unlisted
            if listing is not None or not self._near(registry):
                return await super()._append_family(writes)  # one listing per script
            listing = s
            keys += registry.keys
            entry = encode_item({"purpose": purpose}, 0, registry.max_item_bytes)
            args += [batch, registry.ttl_ms, entry, purpose]
        lasts = await self._call(layout.FAMILY_APPEND, self._client, tuple(keys), *args)
        if listing is not None:
            listing.listed()
        return [
            s._appended(payloads, last)
            for s, (_, payloads), last in zip(near, writes, lasts, strict=True)
        ]

    async def _load(
        self, limit: int | None, after: int | None = None, before: int | None = None
    ) -> list[Row]:
        members = await self._call(
            _read_range, self._client, self.keys[0], limit, after, before, reads=True
        )
        return self._loaded(members, limit, after, before)

    async def _load_family(
        self, reads: list[tuple[BaseSession, int | None, int | None, int | None]]
    ) -> list[list[Row]]:
        # One pipeline (no MULTI) on this client.
        near = [s for s, *_ in reads if self._near(s)]
        if len(near) < len(reads):
            return await super()._load_family(reads)

        async def send() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for s, (_, limit, after, before) in zip(near, reads, strict=True):
                _read_range(pipe, s.keys[0], limit, after, before)
            return await pipe.execute()  # type: ignore[no-any-return]

        answers = await self._call(send, reads=True)
        return [
            s._loaded(members, limit, after, before)
            for s, (_, limit, after, before), members in zip(near, reads, answers, strict=True)
        ]

    async def _commit(
        self,
        ops: list[tuple[str, BaseSession, list[str]]],
        expect: list[tuple[BaseSession, int | None]],
    ) -> list[Any] | None:
        # One script per shape the layout writes with a guard (one op, one guard).
        shape = one_guarded(self, ops, expect, self._near)
        if shape is None:
            return None
        kind, _, payloads, guard, seq, own = shape
        if guard is None:
            return [await (self._append(payloads) if kind == "append" else self._pop())]
        assert self._near(guard)  # checked above; narrows its type
        expected = "" if seq is None else str(seq)
        if kind == "append":
            last = await self._script(layout.APPEND_IF_NEWEST, expected, *payloads, guard=guard)
            if int(last) < 0:
                raise CommitConflictError(f"session {guard.session_id!r} moved past {seq}")
            return [self._appended(payloads, last)]
        self._note_newest(None)
        mine = "*" if own is None else str(own)
        reply = await self._script(layout.POP_IF_NEWEST, expected, mine, guard=guard)
        if not int(reply[0]):
            raise CommitConflictError(f"session {guard.session_id!r} moved past {seq}")
        return [None if len(reply) < 2 or reply[1] is None else self._rows([reply[1]])[0][1]]

    async def _pop(self) -> str | None:
        self._note_newest(None)
        member = await self._script(layout.POP)
        return None if member is None else self._rows([member])[0][1]

    async def _pop_row_checked(self, check: Callable[[str], Any]) -> Any:
        """A script pops only the member ``check`` was shown: one round trip when this object
        knows the newest member, else two (a wrong guess is answered with the newest)."""
        guess = self.store.newest.get(self.keys[0])
        verified = False  # whether the server named ``guess`` as its newest member
        while True:
            outcome: Any = None
            if guess is None:
                guess = ""  # matches no member: the script answers with the newest
            else:
                try:
                    outcome = check(self._rows([guess])[0][1])
                except Exception:
                    if verified:
                        raise
                    guess = None  # a stale guess: look at the real newest before refusing
                    continue
            self._note_newest(None)
            answer = await self._script(layout.POP_IF, guess)
            if answer[0] == 0:
                return None
            if answer[0] == 2:
                self._note_newest(answer[2] if len(answer) > 2 else None)
                return outcome
            guess, verified = answer[1], True
            self._note_newest(guess)

    async def _clear(self) -> None:
        self._note_newest(None)
        await self._script(layout.CLEAR)

    async def _delete_before(self, before: int) -> int:
        # Leaves expiry alone: removing dead items must not prolong the life of the rest.
        return int(
            await self._call(self._client.zremrangebyscore, self.keys[0], "-inf", f"({before}")
        )

    async def _write_at(self, rows: list[Row], created: float, updated: float) -> None:
        times = round(created * 1000), round(updated * 1000)
        held = int(await self._script(layout.WRITE_AT, *times, *_pairs(rows)))
        if held:
            raise SequenceConflictError(
                f"session {self.session_id!r} already holds {held} item(s); "
                "write_sequenced_items fills an empty session only. Nothing was written"
            )
        self._note_newest(None)

    async def _rewrite(self, rows: list[Row]) -> int:
        return int(await self._call(layout.REWRITE, self._client, self.keys, *_pairs(rows)))

    async def _replace_rows(
        self, expected: list[Row] | None, payloads: list[str], prune: Callable[[str], bool] | None
    ) -> bool:
        """The SDK compaction hook's swap: one script, which changes nothing if the members
        shown moved."""
        head: list[Any] = [-1, 0]  # replace all
        if expected is not None:
            pruned = [] if prune is None else await self._prunable(expected[0][0], prune)
            shown = [_member(seq, text) for seq, text in expected]
            head = [len(expected), len(pruned), *shown, *pruned]
        return int(await self._script(layout.REPLACE, *head, *payloads)) >= 0

    async def _prunable(self, before: int, prune: Callable[[str], bool]) -> list[Any]:
        """The oldest members below ``before`` for which ``prune`` holds, up to the first not."""
        out: list[Any] = []
        below = _bounds(None, before)
        while True:
            members = await self._call(
                self._client.zrangebyscore, self.keys[0], *below, start=len(out), num=200
            )
            for (_, text), member in zip(self._rows(members), members, strict=True):
                if not prune(text if isinstance(text, str) else text.decode()):
                    return out
                out.append(member)
            if len(members) < 200:
                return out

    async def _count(self, after: int | None = None, before: int | None = None) -> int:
        bounds = _bounds(after, before)
        return int(await self._call(self._client.zcount, self.keys[0], *bounds, reads=True))

    async def _close(self) -> None:
        await self.store.release()

    def _owns_resources(self) -> bool:
        return self.store.owned  # the caller's own client: close() is a no-op, as the SDK's

    # -- helpers ---------------------------------------------------------------------------------

    def _near(self, other: object) -> TypeGuard[RedisSession]:
        """Whether one script or pipeline reaches ``other``'s keys too (never on a cluster)."""
        return not self._cluster and isinstance(other, RedisSession) and other.client is self.client

    def _appended(self, payloads: list[str], last: Any) -> list[int]:
        """The numbers of ``payloads`` appended up to ``last``; notes the newest member."""
        last = int(last)
        self._note_newest(f"{last}:{payloads[-1]}")
        return list(range(last - len(payloads) + 1, last + 1))

    def _loaded(
        self, members: list[Any], limit: int | None, after: int | None, before: int | None
    ) -> list[Row]:
        """The rows of a ``_read_range`` answer, oldest first."""
        if after is None and before is None:
            if members:
                self._note_newest(members[-1])
        elif limit is not None:
            members.reverse()
        return self._rows(members)

    def _note_newest(self, member: str | bytes | None) -> None:
        self.store.newest.note(self.keys[0], member)

    def _rows(self, members: list[Any]) -> list[Row]:
        return _parse_rows(members, self.keys[0], self.key_prefix)

    def _script(self, script: Any, *args: Any, guard: RedisSession | None = None) -> Any:
        """Run ``script`` on this session's keys (and ``guard``'s items key) with the expiry
        as ARGV[1]."""
        keys = self.keys if guard is None else (*self.keys, guard.keys[0])
        return self._call(script, self._client, keys, self.ttl_ms, *args)

    async def _call(
        self, command: Callable[..., Awaitable[T]], *args: Any, reads: bool = False, **kwargs: Any
    ) -> T:
        """Run ``command(*args, **kwargs)``, translating failures to this package's errors
        (``reads``: it writes nothing); waits for a connection while the pool is full."""
        try:
            if self._cluster:
                # Concurrent first calls on a cold RedisCluster race inside redis-py (one
                # call's topology discovery closes connections the others are using).
                await self._client.initialize()
            try:
                return await command(*args, **kwargs)
            except MaxConnectionsError:
                return await self._when_pool_frees(functools.partial(command, *args, **kwargs))
        except ResponseError as exc:
            message = str(exc)
            if "WRONGTYPE" in message:
                raise BackendDataError(
                    f"RedisSession {self.session_id!r}: {self.keys} hold a value of another type "
                    f"than ({ITEMS_TYPE}, {META_TYPE}); is another application using key_prefix "
                    f"{self.key_prefix!r}? Nothing was changed. ({message})"
                ) from exc
            if message.startswith("EXPIRYRANGE"):
                raise ValueError(
                    f"RedisSession {self.session_id!r}: {message.removeprefix('EXPIRYRANGE ')} "
                    "(the SDK raises ValueError the same way); use a smaller ttl"
                ) from exc
            if message.startswith("CORRUPT"):
                raise BackendDataError(
                    f"RedisSession {self.session_id!r}: {message}; set the counter to the highest "
                    "sequence number stored (or delete the session's keys)"
                ) from exc
            if isinstance(exc, _UNAVAILABLE) or message.startswith("BUSY"):
                raise self._unavailable(exc, reads) from exc
            raise
        except _UNAVAILABLE as exc:
            raise self._unavailable(exc, reads) from exc

    async def _when_pool_frees(self, command: Callable[[], Awaitable[T]]) -> T:
        """Retry ``command`` while the pool is full, backing off, up to ``timeout``: for pools
        that cannot wait themselves, RedisCluster's and a caller's plain ConnectionPool
        (test_a_full_pool_that_cannot_wait_is_retried_until_timeout)."""
        loop = asyncio.get_running_loop()
        give_up = None if self.timeout is None else loop.time() + self.timeout
        pause = 0.0005
        while True:
            await asyncio.sleep(pause)
            try:
                return await command()
            except MaxConnectionsError:
                if give_up is not None and loop.time() >= give_up:
                    raise
                pause = min(pause * 2, 0.05)

    def _unavailable(self, exc: BaseException, reads: bool) -> BackendUnavailableError:
        where = _describe(self._client)
        if isinstance(exc, AuthenticationError) or str(exc).startswith(("NOAUTH", "WRONGPASS")):
            return BackendUnavailableError(
                f"{where}: authentication required/failed: check the user and password in the "
                f"URL ({type(exc).__name__}: {exc}); nothing was read or written"
            )
        if isinstance(exc, (TimeoutError, RedisTimeoutError)):
            reason = "did not answer within the client's socket timeout"
        elif isinstance(exc, BusyLoadingError):
            reason = "is loading its dataset"
        elif isinstance(exc, MaxConnectionsError) or str(exc) == "No connection available.":
            reason = f"had no free pooled connection within timeout={self.timeout} s"
        else:
            reason = f"failed: {type(exc).__name__}: {exc}"
        return BackendUnavailableError(
            f"{where} {reason} (session {self.session_id!r}); check that it is running and "
            "reachable."
            + ("" if reads else " A write that fails this way was applied fully or not at all.")
        )


async def open_url(url: str, session_id: str, **options: Any) -> RedisSession:
    """``open_session`` entry for ``redis://``, ``rediss://`` and ``unix://`` URLs."""
    return RedisSession.from_url(session_id, url=url, **options)


def open_store(
    url: str,
    *,
    redis_kwargs: dict[str, Any] | None = None,
    cluster: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> StoreHold:
    """Open the store at ``url`` (arguments as in :meth:`RedisSession.from_url`); ``await
    store.close()`` when done."""
    return StoreHold(RedisStore.for_url(url, redis_kwargs, cluster, timeout))


__all__ = ["DEFAULT_TIMEOUT", "RedisSession", "RedisStore", "open_store", "open_url"]
