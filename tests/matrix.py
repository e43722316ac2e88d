"""Every backend and every wrapper stack, for tests that must hold for all of them.

``BACKENDS`` lists the stores (with the server each needs); ``STACKS`` maps a name to a function
wrapping an inner session. ``tests/test_matrix.py`` runs the conformance kit on each pair.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents.memory import Session
from cryptography.fernet import Fernet

from agent_sessions import (
    AdvancedSession,
    BranchingSession,
    CompactionSession,
    EncryptedSession,
    InMemorySession,
    SQLiteSession,
    TTLSession,
    UsageTrackingSession,
)
from agent_sessions.wrappers.compaction import item_count_trigger
from tests.servers import MARIADB_URL, MONGODB_URL, POSTGRES_URL, REDIS_URL, RUN, require_server
from tests.wrapper_stacks import IdentitySummarizer


@dataclass(frozen=True)
class Backend:
    name: str
    open: Callable[[str], Awaitable[Session]]  # session id -> session
    needs: Callable[[], None] | None = None  # skips (fails under CI=true) without its server
    concurrent_tasks: int = 200


_RUN = RUN
_SQLITE_DIR = tempfile.mkdtemp(prefix="agent-sessions-matrix-")


async def _memory(session_id: str) -> Session:
    return InMemorySession(session_id)


async def _sqlite(session_id: str) -> Session:
    return SQLiteSession(session_id, os.path.join(_SQLITE_DIR, "matrix.db"))


REDIS_PREFIX = f"matrix{_RUN}"


async def _redis(session_id: str) -> Session:
    from agent_sessions import RedisSession

    return RedisSession.from_url(session_id, url=REDIS_URL, key_prefix=REDIS_PREFIX)


def _redis_up() -> None:
    require_server("Redis", "127.0.0.1", 6379)


_MONGO_STANDIN: Any = None


def reset_standins() -> None:
    """Start the next test on an empty MongoDB stand-in: mongomock scans every document of a
    collection on each query (it has no indexes), so a store shared by the whole run makes
    each test slower than the last (124 s for one concurrency test at the end of a run)."""
    global _MONGO_STANDIN
    _MONGO_STANDIN = None


async def _mongodb_standin(session_id: str) -> Session:
    global _MONGO_STANDIN
    from mongomock_motor import AsyncMongoMockClient

    from agent_sessions import MongoDBSession

    if _MONGO_STANDIN is None:
        _MONGO_STANDIN = AsyncMongoMockClient()
    return MongoDBSession(session_id, client=_MONGO_STANDIN, database=f"matrix{_RUN}")


async def mongodb_standin_store() -> Any:
    """A store over the run's MongoDB stand-in client (which it leaves open)."""
    from agent_sessions.backends.mongodb import MongoDBStore
    from agent_sessions.core.registry import StoreHold

    await _mongodb_standin("store")  # makes the stand-in client
    return StoreHold(MongoDBStore(_MONGO_STANDIN, owned=False, database=f"matrix{_RUN}"))


SQL_PREFIX = f"matrix{_RUN}_"
"""Table prefix of the SQL backends' tables; tests/test_matrix.py drops them at the end."""


def _sql(url: str) -> Callable[[str], Awaitable[Session]]:
    async def open_sql(session_id: str) -> Session:
        from agent_sessions import SQLAlchemySession

        return SQLAlchemySession.from_url(session_id, url=url, table_prefix=SQL_PREFIX)

    return open_sql


def _postgres_up() -> None:
    require_server("PostgreSQL", "127.0.0.1", 5432)


def _mariadb_up() -> None:
    require_server("MariaDB", "127.0.0.1", 3306)


SQL_URLS = {"postgres": POSTGRES_URL, "mariadb": MARIADB_URL}

BACKENDS: list[Backend] = [
    Backend("memory", _memory),
    Backend("sqlite", _sqlite),
    Backend("redis", _redis, _redis_up),
    # mongomock runs every operation to completion in turn, so 200 concurrent writers test no
    # more interleaving than 40 there; a real server (MONGODB_URL) keeps 200.
    Backend("mongodb-standin", _mongodb_standin, concurrent_tasks=40),
    Backend("postgres", _sql(POSTGRES_URL), _postgres_up),
    Backend("mariadb", _sql(MARIADB_URL), _mariadb_up),
    Backend(
        "sqlalchemy-sqlite",
        _sql(f"sqlite+aiosqlite:///{os.path.join(_SQLITE_DIR, 'sqlalchemy.db')}"),
        concurrent_tasks=100,  # one file lock serialises the writers; 100 contend as much as 200
    ),
]


async def _sdk_foreign(session_id: str) -> Session:
    from agents.memory import SQLiteSession as SDKSQLiteSession

    from agent_sessions.wrappers.foreign import ForeignSession

    path = os.path.join(_SQLITE_DIR, "sdk.db")
    return ForeignSession(
        SDKSQLiteSession(session_id, path), sibling_factory=lambda i: SDKSQLiteSession(i, path)
    )


FOREIGN_BACKEND = Backend("sdk-foreign", _sdk_foreign)
"""The SDK's own SQLiteSession numbered by ForeignSession (a session from outside)."""

if MONGODB_URL:
    _MONGODB_URL: str = MONGODB_URL  # narrowed here; the closure below would see str | None

    async def _mongodb(session_id: str) -> Session:
        from agent_sessions import MongoDBSession

        return MongoDBSession.from_uri(
            session_id, uri=_MONGODB_URL, database=f"agent_sessions_matrix{_RUN}"
        )

    BACKENDS.append(Backend("mongodb", _mongodb))

Stack = Callable[[Session], Session]

KEY = Fernet.generate_key().decode()
DAY = 86_400.0


class MatrixClock:
    """The TTL layers' clock: wall time plus an offset a test may move forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


CLOCK = MatrixClock()
KEYRING: dict[str, str] = {"k0": KEY}
"""The encryption layers' keys; the newest (last) one is active. A test may add one to rotate."""


def _encrypted(inner: Session) -> Session:
    return EncryptedSession(inner, keys=dict(KEYRING), active=list(KEYRING)[-1])


def _ttl(inner: Session) -> Session:
    return TTLSession(inner, ttl=DAY, clock=CLOCK)


def _compaction(inner: Session) -> Session:
    """Compaction really cutting every 4 items; the identity summariser keeps views exact."""
    return CompactionSession(
        inner,
        summarizer=IdentitySummarizer(),
        should_trigger_compaction=item_count_trigger(4),
        keep_last=2,
        compact_on_write=True,
    )


def _resilient(inner: Session) -> Session:
    """The resilient layer over a healthy primary: it must be a plain Session then."""
    from agent_sessions.wrappers.resilient import ResilientSession

    return ResilientSession(inner, os.path.join(_SQLITE_DIR, "resilient-spool.db"))


STACKS: dict[str, Stack] = {
    "bare": lambda inner: inner,
    "encrypted": _encrypted,
    "ttl": _ttl,
    "encrypted-ttl": lambda inner: _encrypted(_ttl(inner)),
    "usage": lambda inner: UsageTrackingSession(inner),
    "branching": lambda inner: BranchingSession(inner),
    "advanced": lambda inner: AdvancedSession(inner),
    "compaction": _compaction,
    # Every layer at once: compaction over a branch view (numbered through ForeignSession,
    # a view having no sequence numbers of its own); the TTL stacks are the two below.
    "full": lambda inner: _compaction(AdvancedSession(_encrypted(inner))),
    "advanced-ttl": lambda inner: AdvancedSession(_encrypted(_ttl(inner))),
    "compaction-ttl": lambda inner: _compaction(_encrypted(_ttl(inner))),
    "resilient": lambda inner: _resilient(inner),
}
