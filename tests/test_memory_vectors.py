"""Archival vector ranking with numpy (extra ``memory-vector``) returns exactly what the
pure-Python ranking returns, order included, through inserts, supersedes, re-embedding and
every filter; without numpy the archive falls back to pure Python."""

from __future__ import annotations

import hashlib
import os
import random
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import pytest
import pytest_asyncio
from agents.memory import Session

from agent_sessions import InMemorySession, InMemoryStore, SQLiteSession
from agent_sessions.memory import Archive, HashingEmbedder
from agent_sessions.memory.search import dot, unit
from agent_sessions.memory.vectors import Filters, NumpyVectors

pytest.importorskip("numpy")  # in the dev extras (memory-vector), so CI runs these


class GridEmbedder:
    """Vectors with coordinates in {0, 1} (many exact ties) nudged by multiples of 1e-9 (ties
    that float32 cannot tell apart but float64 can), from a hash of the text."""

    def __init__(self, dim: int = 6, name: str | None = None) -> None:
        self.dim = dim
        self.name = name or f"grid-{dim}"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            vector = [float(digest[i] & 1) for i in range(self.dim)]
            vector[0] += (digest[-1] % 4) * 1e-9
            out.append(vector)
        return out


Opener = Callable[[str], Awaitable[Session]]


@pytest_asyncio.fixture(params=["memory", "sqlite"])
async def opener(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    opened: list[Session] = []
    memory_store = InMemoryStore()
    folder = tempfile.mkdtemp(prefix="agent-sessions-vectors-")

    async def open_(session_id: str) -> Session:
        if request.param == "memory":
            session: Session = InMemorySession(session_id, store=memory_store)
        else:
            session = SQLiteSession(session_id, os.path.join(folder, "vectors.db"))
        opened.append(session)
        return session

    yield open_
    for session in opened:
        await session.clear_session()
        await session.close()  # type: ignore[attr-defined]


def _pure(archive_args: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> Archive:
    """An archive built as if numpy were not installed."""
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "numpy", None)  # `import numpy` raises ImportError
        archive = Archive(*archive_args)
    return archive


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(4))
async def test_numpy_ranking_equals_pure_python_through_every_change(
    opener: Opener, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    now = [1000.0]
    store = await opener(f"archive{seed}")
    writer = Archive(store, GridEmbedder(), lambda: now[0])
    fast = Archive(store, GridEmbedder(), lambda: now[0])
    slow = _pure((store, GridEmbedder(), lambda: now[0]), monkeypatch)
    assert (fast.vector_ranking, slow.vector_ranking) == ("numpy", "python")
    tags = ["a", "b", "c", "d"]
    searches = 0
    for step in range(12):
        for n in range(rng.randint(5, 40)):
            now[0] += rng.choice([0.0, 1.0])  # equal times too
            await writer.insert(
                f"fact {step}-{n} w{rng.randint(0, 20)}",
                rng.sample(tags, rng.randint(0, 3)),
                valid_to=rng.choice([None, None, now[0] + rng.uniform(-5, 50)]),
            )
        for _ in range(rng.randint(0, 4)):
            old = rng.choice(writer.passages)
            await writer.insert(f"update of {old.id} {step}", ["a"], supersedes=old.id)
        for _ in range(rng.randint(0, 2)):  # re-asserted: current again, maybe with a new end
            old = rng.choice(writer.passages)
            await writer.insert(old.content, valid_to=rng.choice([None, now[0] + 10]))
        if step % 4 == 3:  # re-embed some passages with another embedder, then search with it
            other = Archive(store, GridEmbedder(8), lambda: now[0])
            await other.reembed(batch=rng.randint(5, 50))
        for _ in range(6):
            embedder = rng.choice([GridEmbedder(), GridEmbedder(8)])
            fast.embedder = slow.embedder = embedder
            query = rng.choice(["fact", "w3 w7", "zzz unknown", f"update {step}"])
            options: dict[str, Any] = {
                "tags": rng.sample(tags, rng.randint(0, 2)) or None,
                "tag_match_mode": rng.choice(["any", "all"]),
                "top_k": rng.choice([1, 5, 20, 200]),
                "start": rng.choice([None, now[0] - 20]),
                "end": rng.choice([None, now[0] - 5]),
                "include_inactive": rng.random() < 0.3,
            }
            expected = [p.id for p in await slow.search(query, **options)]
            assert [p.id for p in await fast.search(query, **options)] == expected, options
            searches += bool(expected)
    assert searches > 20  # the comparisons were not all empty


@pytest.mark.asyncio
async def test_the_vector_ranking_alone_matches_on_ties_and_near_ties() -> None:
    import numpy

    embedder = GridEmbedder()
    index = NumpyVectors(numpy)
    vectors = [unit(v) for v in await embedder.embed([f"passage {n}" for n in range(300)])]
    for doc, vector in enumerate(vectors):
        tags = ["t"] if doc % 3 else []
        index.add(doc, at=1.0, valid_to=None, tags=tags, embedder=embedder.name, vector=vector)
    for probe_text in ("q1", "q2", "q3", "q4"):
        probe = unit((await embedder.embed([probe_text]))[0])
        scores = [dot(probe, v) for v in vectors]
        for mode, depth in (("any", 50), ("all", 7), ("any", 1000)):
            match: Literal["any", "all"] = "any" if mode == "any" else "all"
            filters = Filters(2e9, None, None, frozenset({"t"}), match, False)
            kept = [doc for doc in range(len(vectors)) if doc % 3]
            pure = sorted(kept, key=lambda doc: (-scores[doc], doc))[:depth]
            assert index.rank(embedder.name, probe, filters, depth, scores.__getitem__) == pure


@pytest.mark.asyncio
async def test_without_numpy_the_archive_ranks_in_pure_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "numpy", None)
    assert NumpyVectors.create() is None
    archive = Archive(InMemorySession("no-numpy"), HashingEmbedder())
    assert archive.vector_ranking == "python"
    await archive.insert("the cat sleeps on the sofa")
    await archive.insert("stock prices fell sharply")
    [top] = await archive.search("cats sleeping", top_k=1)  # trigrams, no shared word
    assert top.content == "the cat sleeps on the sofa"


@pytest.mark.asyncio
async def test_vectors_of_another_length_fail_as_in_pure_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = InMemorySession("lengths")
    writer = Archive(store, GridEmbedder(6, name="same"))
    await writer.insert("one fact")
    for archive in (
        Archive(store, GridEmbedder(4, name="same")),
        _pure((store, GridEmbedder(4, name="same")), monkeypatch),
    ):
        with pytest.raises(ValueError, match="different lengths"):
            await archive.search("zzz")
    mixed = Archive(store, GridEmbedder(4, name="same"))
    await mixed.insert("another fact")  # the name now has vectors of two lengths
    mixed.embedder = GridEmbedder(6, name="same")
    with pytest.raises(ValueError, match="different lengths"):
        await mixed.search("zzz")
