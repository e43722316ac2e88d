"""Memory search costs: conversation_search over N recall items, archival_memory_search over
N passages, and the render cost per model call (blocks alone, and with relevant memory: recall=3,
archival=3 over 10k recall items and 1k passages), against the raw query a user would write.

    python benchmarks/bench_recall.py [--items 100000] [--passages 10000 100000] [--dim 256]
                    [--backends memory sqlite redis postgres mariadb mongodb]
                    [--parts recall archive render] [--no-in-process]
                    [--corpus english korean]

Recall runs on each corpus: ``english`` (words ``w0``..``w4999``, queries of two words) and
``korean`` (sentences of Korean nouns with their particles and verb endings attached, as
Korean is written; queries of two bare nouns, as a user types them). Both contenders get the
same raw query: the raw full-text engines find no Korean word with a particle attached, which
``hits_per_query`` beside ``raw_hits_per_query`` shows.

Recall's raw contender is the idiomatic full-text query on the same server over the same texts
(RAW_RECALL): PostgreSQL a ``tsvector`` + GIN table ranked by ``ts_rank``, MariaDB an InnoDB
``FULLTEXT`` ``MATCH ... AGAINST`` in natural language mode, SQLite an FTS5 table in a file
with ``bm25()``. Memory, Redis and MongoDB have no native full-text search here, so theirs is an
in-memory SQLite FTS5 table (no cold number: a user would first load every text). Ours is
measured on the store's first search ever (which builds its index), cold (a new reader with
its own connection, as the raw cold) and warm (the median of 20 queries, each of which first
checks the store for new records), ours and raw alternating in a new order every query. Recall
runs on the store's own full-text index where it declares one (``native``); the in-process
index is measured too: cold with no snapshot (reads and tokenizes the whole log), the snapshot
write, and cold from that snapshot.

For archival, numpy brute-force cosine over the same vectors (normalised once) and, when
``sqlite-vec`` and ``sqlean.py`` are installed, a sqlite-vec ``vec0`` KNN query (both skipped
without their packages); ours cold (a new reader: loads the side store and builds its index)
and warm, both with numpy and in pure Python (numpy hidden), hybrid and vector alone (a query
sharing no word with any passage), all contenders alternating in a new order every query.

MongoDB without AGENT_SESSIONS_MONGODB_URL runs on the mongomock-motor stand-in, in process:
its numbers say nothing about a server and are labelled so. Everything the run creates (keys,
tables, the MongoDB database) is removed at the end, on error and on SIGTERM too.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import random
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agents.memory import Session

from agent_sessions.core.family import side_store
from agent_sessions.memory import HashingEmbedder, Memory, render_blocks
from agent_sessions.memory._log import RecordLog
from agent_sessions.memory.recall import RecallIndex
from benchmarks.harness import purge

WORDS = [f"w{i}" for i in range(5000)]
QUERIES = 20
REDIS_URL = os.environ.get("AGENT_SESSIONS_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choices(WORDS, k=n))


NOUNS = [
    f"{a}{b}"
    for a in "가나다라마바사아자차카타파하서부대광울제"
    for b in "산울구주원천시강물길집책밥차문꽃"
]
"""Korean nouns of two syllables (a few real ones, 300 in all: 부산, 서울, 대구, 광주...)."""
PARTICLES = ["은", "는", "이", "가", "을", "를", "에서", "에", "으로", "의", "도", "와", "하고"]
ENDINGS = ["있어요.", "했어요.", "좋아요?", "갈까요?", "봤어요.", "먹었어요.", "어때요?"]


def korean_sentence(rng: random.Random, n: int = 6) -> str:
    """A Korean line: nouns, each with a particle attached, then a verb ending."""
    words = [noun + rng.choice(PARTICLES) for noun in rng.choices(NOUNS, k=n)]
    return " ".join([*words, rng.choice(ENDINGS)])


CORPORA: dict[str, tuple[Callable[[random.Random], str], Callable[[random.Random], str]]] = {
    "english": (sentence, lambda rng: " ".join(rng.choices(WORDS, k=2))),
    "korean": (korean_sentence, lambda rng: " ".join(rng.choices(NOUNS, k=2))),
}
"""Per corpus: a line, and the raw query a user would write."""


PREFIX = f"benchrecall{uuid.uuid4().hex[:6]}"


MARIADB_URL = os.environ.get(
    "AGENT_SESSIONS_MARIADB_URL", "mysql+asyncmy://root@127.0.0.1:3306/test"
)
MONGODB_URL = os.environ.get("AGENT_SESSIONS_MONGODB_URL")
LABELS = {
    "memory": "memory",
    "sqlite": "SQLite",
    "redis": "Redis",
    "postgres": "PostgreSQL",
    "mariadb": "MariaDB",
    "mongodb": "MongoDB (real server)"
    if MONGODB_URL
    else "MongoDB (STAND-IN: mongomock-motor in process; its speed says nothing about a server)",
}
CLEANUP: list[Callable[[], Awaitable[Any]]] = []
"""Extra clean-up steps of the current backend (the MongoDB database), run by drop_leftovers."""


async def drop_leftovers(backend: str) -> None:
    """Remove this run's Redis keys, SQL tables (ours and the raw contenders', counters
    included) or MongoDB database."""
    if backend == "redis":
        await purge(PREFIX, redis_url=REDIS_URL)
    elif backend == "postgres":
        await purge(PREFIX, sql_urls=(PG_URL,))
    elif backend == "mariadb":
        await purge(PREFIX, sql_urls=(MARIADB_URL,))
    while CLEANUP:
        await CLEANUP.pop()()


async def opener(backend: str, folder: str) -> Callable[[str], Awaitable[Session]]:
    prefix = PREFIX
    if backend == "memory":
        from agent_sessions import InMemorySession

        return lambda sid: _ready(InMemorySession(sid))
    if backend == "sqlite":
        from agent_sessions import SQLiteSession

        return lambda sid: _ready(SQLiteSession(sid, os.path.join(folder, "bench.db")))
    if backend == "redis":
        from agent_sessions import RedisSession

        return lambda sid: _ready(RedisSession.from_url(sid, url=REDIS_URL, key_prefix=prefix))
    if backend in ("postgres", "mariadb"):
        from agent_sessions import SQLAlchemySession

        url = PG_URL if backend == "postgres" else MARIADB_URL
        return lambda sid: _ready(
            SQLAlchemySession.from_url(sid, url=url, table_prefix=prefix + "_")
        )
    if backend == "mongodb":
        from agent_sessions.backends.mongodb import MongoDBSession

        client: Any
        if MONGODB_URL:
            from pymongo import AsyncMongoClient

            client = AsyncMongoClient(MONGODB_URL)
        else:
            from mongomock_motor import AsyncMongoMockClient

            client = AsyncMongoMockClient()

        async def drop() -> None:
            await client.drop_database(prefix)
            if MONGODB_URL:
                await client.close()

        CLEANUP.append(drop)
        return lambda sid: _ready(MongoDBSession(sid, client=client, database=prefix))
    raise SystemExit(f"unknown backend {backend!r}")


async def _ready(session: Session) -> Session:
    return session


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


class MemoryFTS5:
    """The raw contender where the store has no full-text search of its own here (memory,
    Redis, MongoDB): an SQLite FTS5 table in memory, ``MATCH ... ORDER BY bm25(t)``. Its warm
    query never touches the store, and it has no cold number: a user would first have to load
    every text from the store and build the table, which is what our cold reader does."""

    name = "in-memory SQLite FTS5 (the store has no native full-text search here)"
    has_cold = False

    def __init__(self, folder: str) -> None:
        self.db = sqlite3.connect(":memory:")

    async def fill(self, texts: list[str]) -> None:
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
        self.db.executemany("INSERT INTO t(body) VALUES (?)", [(t,) for t in texts])
        self.db.commit()

    async def connect(self) -> None:
        pass

    async def search(self, query: str) -> list[Any]:
        return self.db.execute(
            "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 10",
            (" OR ".join(query.split()),),
        ).fetchall()

    async def close(self) -> None:
        self.db.close()


class FileFTS5(MemoryFTS5):
    """SQLite: an FTS5 table in a file, ``MATCH ... ORDER BY bm25(t) LIMIT 10`` through the
    stdlib sqlite3 on the event loop's thread (ours goes through a worker thread). Cold: a new
    connection and its first query (the file's pages are in the OS cache)."""

    name = "SQLite FTS5 table in a file, bm25()"
    has_cold = True

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, f"raw-fts5-{uuid.uuid4().hex[:6]}.db")  # one per corpus
        self.db = sqlite3.connect(self.path)

    async def connect(self) -> None:
        self.db.close()
        self.db = sqlite3.connect(self.path)


class PostgresTsvector:
    """PostgreSQL: a table with a generated ``tsvector`` column ('simple' configuration, as
    ours) and a GIN index, ``WHERE tsv @@ q ORDER BY ts_rank(tsv, q) DESC LIMIT 10`` over
    asyncpg. Cold: a new connection and its first query."""

    name = "PostgreSQL tsvector + GIN, ts_rank, ORDER BY ... LIMIT 10 (asyncpg)"
    has_cold = True

    def __init__(self, folder: str) -> None:
        self.table = f"{PREFIX}_raw{uuid.uuid4().hex[:6]}"  # one per corpus
        self.conn: Any = None

    async def fill(self, texts: list[str]) -> None:
        import asyncpg  # type: ignore[import-untyped]

        self.conn = await asyncpg.connect(PG_URL.replace("+asyncpg", ""))
        await self.conn.execute(
            f"CREATE TABLE {self.table} (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL, "
            "tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED)"
        )
        await self.conn.copy_records_to_table(
            self.table, records=[(t,) for t in texts], columns=["body"]
        )
        await self.conn.execute(f"CREATE INDEX {self.table}_tsv ON {self.table} USING GIN (tsv)")
        await self.conn.execute(f"ANALYZE {self.table}")

    async def connect(self) -> None:
        import asyncpg

        await self.conn.close()
        self.conn = await asyncpg.connect(PG_URL.replace("+asyncpg", ""))

    async def search(self, query: str) -> list[Any]:
        return list(
            await self.conn.fetch(
                f"SELECT id FROM {self.table}, to_tsquery('simple', $1) AS q "
                "WHERE tsv @@ q ORDER BY ts_rank(tsv, q) DESC LIMIT 10",
                " | ".join(query.split()),
            )
        )

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


class MariaDBFulltext:
    """MariaDB: an InnoDB table with a FULLTEXT index, ``MATCH (body) AGAINST (%s IN NATURAL
    LANGUAGE MODE)`` ordered by that score, ``LIMIT 10``, over asyncmy. Cold: a new connection
    and its first query. Words shorter than innodb_ft_min_token_size (3) are not indexed, by
    ours either (the same engine)."""

    name = "MariaDB InnoDB FULLTEXT, MATCH AGAINST natural language mode, LIMIT 10 (asyncmy)"
    has_cold = True

    def __init__(self, folder: str) -> None:
        self.table = f"{PREFIX}_raw{uuid.uuid4().hex[:6]}"  # one per corpus
        self.conn: Any = None

    async def _connect(self) -> Any:
        import asyncmy  # type: ignore[import-untyped]
        from sqlalchemy.engine import make_url

        url = make_url(MARIADB_URL)
        return await asyncmy.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            database=url.database or "test",
            autocommit=True,
        )

    async def fill(self, texts: list[str]) -> None:
        self.conn = await self._connect()
        async with self.conn.cursor() as cur:
            await cur.execute(
                f"CREATE TABLE {self.table} (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                "body TEXT NOT NULL) ENGINE=InnoDB"
            )
            for start in range(0, len(texts), 1000):
                await cur.executemany(
                    f"INSERT INTO {self.table} (body) VALUES (%s)",
                    [(t,) for t in texts[start : start + 1000]],
                )
            await cur.execute(f"ALTER TABLE {self.table} ADD FULLTEXT KEY ft (body)")
            await cur.execute(f"ANALYZE TABLE {self.table}")
            await cur.fetchall()

    async def connect(self) -> None:
        self.conn.close()
        self.conn = await self._connect()

    async def search(self, query: str) -> list[Any]:
        async with self.conn.cursor() as cur:
            await cur.execute(
                f"SELECT id, MATCH (body) AGAINST (%s IN NATURAL LANGUAGE MODE) AS score "
                f"FROM {self.table} WHERE MATCH (body) AGAINST (%s IN NATURAL LANGUAGE MODE) "
                "ORDER BY score DESC LIMIT 10",
                (query, query),
            )
            return list(await cur.fetchall())

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


RAW_RECALL: dict[str, Any] = {
    "sqlite": FileFTS5,
    "postgres": PostgresTsvector,
    "mariadb": MariaDBFulltext,
}
"""The raw recall contender per backend: the idiomatic full-text query on the same server over
the same texts; MemoryFTS5 for the others."""


async def bench_recall(
    open_: Callable[[str], Awaitable[Session]],
    items: int,
    backend: str = "memory",
    folder: str = "",
    in_process: bool = True,
    corpus: str = "english",
) -> dict[str, Any]:
    """conversation_search over ``items`` items: ours on the first search ever (it builds the
    store's index), then cold (a new reader) and warm, against
    ``backend``'s raw contender (see RAW_RECALL) cold (a new connection) and warm, the two
    alternating in a new order every query; then the in-process index (``in_process``)."""
    rng = random.Random(1)
    line, query = CORPORA[corpus]
    texts = [line(rng) for _ in range(items)]
    root = await open_("memory:bench:recall")
    memory = Memory(root)
    started = time.perf_counter()
    for start in range(0, items, 1000):
        pairs = [
            (start + i, {"role": "user", "content": t})
            for i, t in enumerate(texts[start : start + 1000])
        ]
        await memory.recall.index("chat", pairs)
    fill = time.perf_counter() - started
    queries = [query(rng) for _ in range(QUERIES)]
    result: dict[str, Any] = {"corpus": corpus, "items": items, "fill_s": round(fill, 2)}
    raw = RAW_RECALL.get(backend, MemoryFTS5)(folder)
    result["raw"] = raw.name
    try:
        started = time.perf_counter()
        await raw.fill(texts)
        result["raw_fill_s"] = round(time.perf_counter() - started, 2)  # its index included
        # The store's first search ever builds its full-text index over what is there (once
        # per store or session, then kept current on write); the raw table's index was built
        # in its fill. A new reader after that is the cold number.
        started = time.perf_counter()
        await memory.recall.search(queries[-1], limit=10)
        result["first_search_ms"] = round((time.perf_counter() - started) * 1000, 1)
        if backend in ("sqlite", "redis", "postgres", "mariadb"):
            # A new reader (a new process) opens its own connection, as the raw cold does:
            # close ours (the shared engine, pool or file goes with its last handle), reopen.
            await root.close()  # type: ignore[attr-defined]
            root = await open_("memory:bench:recall")
            memory = Memory(root)
        cold_reader = Memory(root)
        started = time.perf_counter()
        await cold_reader.recall.search(queries[0], limit=10)
        result["native" if cold_reader.recall.native else "in_process"] = True
        result["cold_ms"] = round((time.perf_counter() - started) * 1000, 1)
        started = time.perf_counter()
        await raw.connect()
        await raw.search(queries[0])
        result["raw_cold_ms"] = (
            round((time.perf_counter() - started) * 1000, 1) if raw.has_cold else None
        )
        ours: list[float] = []
        theirs: list[float] = []
        hits = {True: 0, False: 0}
        for q in queries:
            order = [True, False]
            random.shuffle(order)  # the two alternate, in a new order every query
            for is_ours in order:
                started = time.perf_counter()
                if is_ours:
                    found = await cold_reader.recall.search(q, limit=10)
                else:
                    found = await raw.search(q)
                (ours if is_ours else theirs).append(time.perf_counter() - started)
                hits[is_ours] += len(found)
        result["warm_ms"] = round(median_ms(ours), 2)
        result["raw_warm_ms"] = round(median_ms(theirs), 2)
        # Both must find as much: a raw query that finds nothing would be fast for nothing.
        result["hits_per_query"] = round(hits[True] / QUERIES, 1)
        result["raw_hits_per_query"] = round(hits[False] / QUERIES, 1)
        result["warm_ratio"] = round(median_ms(ours) / median_ms(theirs), 1)
    finally:
        await raw.close()
    if not in_process:
        for purpose in ("memory.recall", "memory.recall.marks", "memory.recall.snapshots"):
            await side_store(root, purpose).clear_session()
        return result
    await side_store(root, "memory.recall.snapshots").clear_session()
    whole = _in_process(root)  # no snapshot yet: the whole log
    started = time.perf_counter()
    await whole.refresh()
    result["in_process_cold_full_ms"] = round((time.perf_counter() - started) * 1000, 1)
    started = time.perf_counter()
    await whole.save_snapshot()
    result["snapshot_write_ms"] = round((time.perf_counter() - started) * 1000, 1)
    await memory.recall.index("chat", [(items + 1, {"role": "user", "content": "after it"})])
    from_snapshot = _in_process(root)
    started = time.perf_counter()
    await from_snapshot.search(queries[0], limit=10)
    result["in_process_cold_snapshot_ms"] = round((time.perf_counter() - started) * 1000, 1)
    warm = []
    for q in queries:
        started = time.perf_counter()
        await from_snapshot.search(q, limit=10)
        warm.append(time.perf_counter() - started)
    result["in_process_warm_ms"] = round(median_ms(warm), 2)
    for purpose in ("memory.recall", "memory.recall.marks", "memory.recall.snapshots"):
        await side_store(root, purpose).clear_session()
    return result


def _in_process(root: Session) -> RecallIndex:
    """A recall index of ``root``'s scope that searches in process (with snapshots)."""
    return RecallIndex(
        side_store(root, "memory.recall"),
        marks=side_store(root, "memory.recall.marks"),
        snapshots=side_store(root, "memory.recall.snapshots"),
        native=False,
    )


def _without_numpy(make: Callable[[], Memory]) -> Memory:
    """``make()`` as if numpy were not installed: the archive ranks in pure Python."""
    saved = sys.modules.get("numpy")
    sys.modules["numpy"] = None  # type: ignore[assignment]
    try:
        return make()
    finally:
        if saved is None:
            del sys.modules["numpy"]
        else:
            sys.modules["numpy"] = saved


def _sqlite_vec(matrix: Any, dim: int) -> Callable[[Any], Any] | None:
    """The sqlite-vec KNN query a user would write (a vec0 table, cosine distance, ``k``) over
    ``matrix``, through sqlean.py (the stdlib sqlite3 here cannot load extensions); None when
    either package is missing. The same exhaustive search as numpy (the 0.1.9 wheel has no
    approximate index), in C over the table's chunks."""
    try:
        sqlean: Any = importlib.import_module("sqlean")
        sqlite_vec: Any = importlib.import_module("sqlite_vec")
    except ImportError:
        return None
    db = sqlean.connect(":memory:")
    db.enable_load_extension(True)
    sqlite_vec.load(db)
    db.execute(f"CREATE VIRTUAL TABLE v USING vec0(e float[{dim}] distance_metric=cosine)")
    db.executemany(
        "INSERT INTO v(rowid, e) VALUES (?, ?)",
        ((i, row.tobytes()) for i, row in enumerate(matrix)),
    )

    def knn(probe: Any) -> Any:
        return db.execute(
            "SELECT rowid, distance FROM v WHERE e MATCH ? AND k = 10", (probe.tobytes(),)
        ).fetchall()

    return knn


async def bench_archive(
    open_: Callable[[str], Awaitable[Session]], passages: int, dim: int = 256
) -> dict[str, Any]:
    """archival_memory_search over ``passages`` passages of ``dim``-dimensional vectors, warm:
    hybrid (keyword + vector) and vector alone (a query no passage shares a word with), ours
    with numpy and in pure Python (the fallback), against numpy brute force and sqlite-vec."""
    rng = random.Random(2)
    embedder = HashingEmbedder(dim)
    root = await open_(f"memory:bench:archive{passages}")
    texts = [sentence(rng, 8) for _ in range(passages)]
    vectors = await embedder.embed(texts)
    store = RecordLog(side_store(root, "memory.archive"))  # pre-embedded records, in bulk
    started = time.perf_counter()
    for start in range(0, passages, 1000):
        await store.append(
            *[
                {
                    "kind": "passage",
                    "id": uuid.uuid4().hex,
                    "content": t,
                    "tags": ["t"],
                    "metadata": {},
                    "at": 1.0,
                    "valid_to": None,
                    "embedder": embedder.name,
                    "vector": v,
                }
                for t, v in zip(
                    texts[start : start + 1000], vectors[start : start + 1000], strict=True
                )
            ]
        )
    fill = time.perf_counter() - started
    queries = [" ".join(rng.choices(WORDS, k=3)) for _ in range(QUERIES)]
    unshared = [f"zz{n} qq{n}" for n in range(QUERIES)]  # no passage has these words
    reader = Memory(root, embedder=embedder)
    started = time.perf_counter()
    await reader.archive.search(queries[0], top_k=10)
    cold = time.perf_counter() - started
    pure = _without_numpy(lambda: Memory(root, embedder=embedder))
    started = time.perf_counter()
    await pure.archive.search(queries[0], top_k=10)
    pure_cold = time.perf_counter() - started
    timed: dict[str, Callable[[int], Awaitable[Any]]] = {
        "hybrid": lambda n: reader.archive.search(queries[n], top_k=10),
        "vector": lambda n: reader.archive.search(unshared[n], top_k=10),
        "pure_hybrid": lambda n: pure.archive.search(queries[n], top_k=10),
        "pure_vector": lambda n: pure.archive.search(unshared[n], top_k=10),
    }
    raw: dict[str, Callable[[Any], Any]] = {}
    probes: list[Any] = []
    try:
        np: Any = importlib.import_module("numpy")
    except ImportError:
        np = None
    if np is not None:
        # The raw contender: what a user writes over the same vectors, normalised once.
        matrix = np.asarray(vectors, dtype=np.float32)
        matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        probes = [np.asarray(v, dtype=np.float32) for v in await embedder.embed(unshared)]

        def numpy_top(probe: Any) -> Any:
            scores = matrix @ probe
            top = np.argpartition(-scores, 10)[:10]
            return top[np.argsort(-scores[top])]

        raw["numpy"] = numpy_top
        knn = _sqlite_vec(matrix, dim)
        if knn is not None:
            raw["sqlite_vec"] = knn
    samples: dict[str, list[float]] = {name: [] for name in [*timed, *raw]}
    for n in range(QUERIES):
        order = [*timed, *raw]
        random.shuffle(order)  # contenders alternate, in a new order every round
        for name in order:
            started = time.perf_counter()
            if name in timed:
                await timed[name](n)
            else:
                raw[name](probes[n])
            samples[name].append(time.perf_counter() - started)
    result: dict[str, Any] = {
        "passages": passages,
        "dim": dim,
        "fill_s": round(fill, 2),
        "cold_ms": round(cold * 1000, 1),
        "pure_cold_ms": round(pure_cold * 1000, 1),
    }
    for name, taken in samples.items():
        result[f"{name}_ms"] = round(median_ms(taken), 2)
    for name in ("numpy", "sqlite_vec"):
        result.setdefault(f"{name}_ms", None)
    await side_store(root, "memory.archive").clear_session()
    return result


RELEVANT_ITEMS, RELEVANT_PASSAGES = 10_000, 1_000


class _RunContext:
    """What the SDK hands dynamic instructions (``RunContextWrapper``): the run's input."""

    def __init__(self, turn_input: list[Any]) -> None:
        self.turn_input = turn_input


async def bench_render(open_: Callable[[str], Awaitable[Session]]) -> dict[str, Any]:
    root = await open_(f"memory:bench:render{uuid.uuid4().hex[:6]}")
    memory = Memory(root)
    for n in range(5):
        await memory.blocks.define(f"block{n}", "x" * 1900, limit=2000)
    for n in range(5):
        await memory.blocks.insert("block0", f"edit {n}")
    render = memory.instructions("You are helpful.")
    samples = []
    for _ in range(50):
        started = time.perf_counter()
        await render(None, None)
        samples.append(time.perf_counter() - started)
    blocks = await memory.blocks.all()
    pure = []
    for _ in range(200):
        started = time.perf_counter()
        render_blocks(blocks)
        pure.append(time.perf_counter() - started)
    # relevant memory (issue 40): recall=3, archival=3 for the latest user message, over
    # RELEVANT_ITEMS recall items and RELEVANT_PASSAGES passages of words drawn Zipf-like from
    # 2,000 (so, as in real text, the commonest words occur in most items), a new message of
    # 8 such words every call
    rng = random.Random(40)
    vocabulary = [f"w{n}" for n in range(2000)]
    weights = [1 / (n + 1) for n in range(2000)]

    def text(words: int) -> str:
        return " ".join(rng.choices(vocabulary, weights, k=words))

    await memory.recall.index(
        "bench-chat",
        [(n, {"role": "user", "content": text(12)}) for n in range(1, RELEVANT_ITEMS + 1)],
    )
    relevant: dict[str, Any] = {}
    for name, embedder in (("keyword", None), ("hashing256", HashingEmbedder(256))):
        scoped = Memory(root, embedder=embedder)
        if embedder is None:
            for _ in range(RELEVANT_PASSAGES):
                await scoped.archive.insert(text(8))
        else:
            await scoped.archive.reembed()
        render = scoped.instructions("You are helpful.", recall=3, archival=3)
        await render(None, None)  # warm: blocks, recall and archive read once
        timed, later = [], []
        for _ in range(50):
            context = _RunContext([{"role": "user", "content": text(8)}])
            started = time.perf_counter()
            rendered = await render(context, None)  # a run's first model call: searches
            timed.append(time.perf_counter() - started)
            started = time.perf_counter()
            await render(context, None)  # a later call of the same run: reuses the result
            later.append(time.perf_counter() - started)
        assert "<relevant_memory>" in rendered
        timed.sort()
        relevant[f"relevant_{name}_ms"] = round(median_ms(timed), 3)
        relevant[f"relevant_{name}_p90_ms"] = round(timed[44] * 1000, 3)
        relevant[f"relevant_{name}_later_call_ms"] = round(median_ms(later), 3)
    for purpose in ("memory.blocks", "memory.recall", "memory.recall.marks", "memory.archive"):
        await side_store(root, purpose).clear_session()
    await side_store(root, "memory.recall.snapshots").clear_session()
    return {
        "render_per_call_ms": round(median_ms(samples), 3),
        "format_only_ms": round(median_ms(pure), 3),
        **relevant,
    }


async def collect(quick: bool) -> list[str]:
    """For ``benchmarks/run.py``: recall (ours vs raw, warm and cold) and archival per
    reachable backend, one report line each. Quick: 10k items and 10k passages; else 100k items
    and 10k + 100k passages. MongoDB only with a real server (AGENT_SESSIONS_MONGODB_URL)."""
    items, passages = (10_000, [10_000]) if quick else (100_000, [10_000, 100_000])
    backends = ["memory", "sqlite", "redis", "postgres", "mariadb"]
    lines: list[str] = []
    if MONGODB_URL:
        backends.append("mongodb")
    else:
        lines.append(
            "Recall/archival: MongoDB not measured (no server; set AGENT_SESSIONS_MONGODB_URL)."
        )
    with tempfile.TemporaryDirectory() as folder:
        for backend in backends:
            label = LABELS[backend]
            try:
                open_ = await opener(backend, folder)
                for corpus in CORPORA:
                    r = await bench_recall(open_, items, backend, folder, False, corpus)
                    raw_cold = r["raw_cold_ms"]
                    lines.append(
                        f"Recall, {label}, {items:,} {corpus} items: ours warm {r['warm_ms']} ms "
                        f"vs raw {r['raw_warm_ms']} ms ({r['warm_ratio']}x; raw = {r['raw']}); "
                        f"hits per query {r['hits_per_query']} vs raw "
                        f"{r['raw_hits_per_query']}; first search (builds the store's index) "
                        f"{r['first_search_ms']} ms; cold {r['cold_ms']} ms vs raw "
                        + (f"{raw_cold} ms" if raw_cold is not None else "n/a")
                        + "."
                    )
                for n in passages:
                    a = await bench_archive(open_, n)
                    lines.append(
                        f"Archival, {label}, {n:,} passages: ours hybrid {a['hybrid_ms']} ms, "
                        f"vector {a['vector_ms']} ms vs numpy brute force {a['numpy_ms']} ms; "
                        f"cold {a['cold_ms']} ms."
                    )
            except Exception as exc:  # a server that is down: say so, go on
                lines.append(f"Recall/archival, {label}: skipped, {type(exc).__name__}: {exc}")
            finally:
                await drop_leftovers(backend)
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--passages", type=int, nargs="+", default=[10_000])
    parser.add_argument("--dim", type=int, default=256, help="archival vector dimensions")
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["memory", "sqlite"],
        choices=["memory", "sqlite", "redis", "postgres", "mariadb", "mongodb"],
    )
    parser.add_argument(
        "--no-in-process", action="store_true", help="skip recall's in-process index numbers"
    )
    parser.add_argument(
        "--corpus", nargs="+", default=list(CORPORA), choices=list(CORPORA), help="recall corpora"
    )
    parser.add_argument(
        "--parts", nargs="+", default=["recall", "archive", "render"], help="what to measure"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for backend in args.backends:
            label = LABELS[backend]
            try:
                open_ = await opener(backend, folder)
                for corpus in args.corpus if "recall" in args.parts else []:
                    found = await bench_recall(
                        open_, args.items, backend, folder, not args.no_in_process, corpus
                    )
                    print(label, "recall", found, flush=True)
                for n in args.passages if "archive" in args.parts else []:
                    print(label, "archive", await bench_archive(open_, n, args.dim), flush=True)
                if "render" in args.parts:
                    print(label, "render", await bench_render(open_), flush=True)
            finally:
                await drop_leftovers(backend)


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt  # so a SIGTERM runs the clean-up in main's finally, as Ctrl-C does


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    asyncio.run(main())
