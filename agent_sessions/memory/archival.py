"""Archival memory: passages with tags, metadata and validity, searched by keyword and
vector together (reciprocal-rank fusion), filters applied before ranking."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agents.memory import Session

from ..errors import MemoryEditError
from ._log import ERASED, RecordLog
from .embedders import Embedder
from .search import BM25Index, dot, fused_scores, reciprocal_rank_fusion, unit
from .vectors import Filters, NumpyVectors

log = logging.getLogger(__name__)

CANDIDATES = 50
"""How many hits of each ranking enter the fusion (at least; more when top_k is larger)."""
_OUTAGES: dict[str, str] = {}
"""Per embedder name, why its last call failed while it keeps failing. Process-wide, as the
outage is the service's: warned once per outage, not once per scope or call (test:
test_memory_features.py::test_a_failing_embedder_fails_no_insert_search_or_tool_and_catches_up)."""
HALF_LIFE = 30 * 86_400.0
"""Default ``half_life`` of the recency weight in search: 30 days."""


@dataclass(frozen=True)
class Passage:
    """One archived fact. ``id`` is the hash of its content (so no duplicates)."""

    id: str
    content: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    at: float
    valid_to: float | None = None
    superseded_by: str | None = None
    embedder: str | None = field(default=None, repr=False)
    packed: bytes | None = field(default=None, repr=False)
    """The embedding scaled to unit length, as float32 little-endian (see ``vector``)."""
    expired_at: float | None = None
    """When ``Archive.expire`` marked it expired (it stays stored)."""

    @property
    def vector(self) -> tuple[float, ...] | None:
        """The embedding scaled to unit length (the stored float32 values), decoded on each
        access: the archive keeps only the packed bytes."""
        return None if self.packed is None else unpack_vector(self.packed)

    def active(self, now: float) -> bool:
        """Neither superseded nor past ``valid_to`` at ``now``."""
        return self.superseded_by is None and (self.valid_to is None or self.valid_to > now)


def pack_vector(vector: Sequence[float]) -> dict[str, Any]:
    """How a record stores an embedding: scaled to unit length (in float64) once, at write,
    then rounded to float32 little-endian, base64 text, with its length (``dim``)."""
    values = unit(vector)
    return {"dim": len(values), "f32": base64.b64encode(_packed(values)).decode("ascii")}


def _packed(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def unpack_vector(packed: bytes) -> tuple[float, ...]:
    """The float32 values of ``packed`` (``Passage.packed``) as Python floats."""
    return struct.unpack(f"<{len(packed) // 4}f", packed)


def stored_vector(value: Any) -> bytes | None:
    """The packed unit vector of a record's ``vector``: the packed form (``pack_vector``) as it
    is, or a JSON list of floats (records written before it) scaled to unit length and rounded
    to float32 as at write, so both forms rank by the same rules."""
    if value is None:
        return None
    if isinstance(value, dict):
        packed = base64.b64decode(value["f32"])
        if len(packed) != 4 * int(value["dim"]):
            raise ValueError(f"stored vector of {len(packed)} bytes, dim {value['dim']}")
        return packed
    return _packed(unit(value))


def content_id(content: str) -> str:
    """The id of a passage: a hash of its content with surrounding whitespace removed."""
    return hashlib.sha256(content.strip().encode()).hexdigest()[:32]


MAX_CONTENT = 10_000
"""The longest passage, in characters: one stored fact, not a document (each later search
would carry a flood of text)."""
MAX_TAGS = 32
MAX_TAG = 100
"""At most ``MAX_TAGS`` tags of ``MAX_TAG`` characters each on a passage."""


_ENDS = ".,;:!?\"'()[]{}"


def same_text_key(content: str) -> tuple[str, ...]:
    """What ``dedupe`` compares: the words, case-folded, with punctuation at their ends
    stripped; signs and symbols that make a different fact (``C++``/``C#``, ``-200``/``200``,
    ``3/5``/``3.5``) are kept (test_dedupe_keeps_facts_differing_in_symbols_or_numbers)."""
    return tuple(word for word in (w.strip(_ENDS) for w in content.casefold().split()) if word)


def check_tags(tags: object) -> tuple[str, ...]:
    """``tags`` as a sorted tuple of distinct non-empty str (None: no tags)."""
    if tags is None:
        return ()
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise MemoryEditError(f"tags must be a list of str, got {tags!r:.200}")
    if not all(isinstance(t, str) and t for t in tags):
        raise MemoryEditError(f"tags must be non-empty str, got {list(tags)!r:.200}")
    if len(tags) > MAX_TAGS or any(len(t) > MAX_TAG for t in tags):
        raise MemoryEditError(
            f"use at most {MAX_TAGS} tags of at most {MAX_TAG} characters each, got "
            f"{len(tags)} of up to {max(map(len, tags)):,} characters"
        )
    return tuple(sorted(set(tags)))


class Archive:
    """The archival passages of one memory scope, in its side store ``store``."""

    def __init__(
        self,
        store: Session,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._log = RecordLog(store, keep=False)
        self.embedder = embedder
        self._clock = clock
        self._index = BM25Index()
        self.passages: list[Passage] = []
        self._by_id: dict[str, int] = {}
        self._vectors = NumpyVectors.create()
        self._reembedding: asyncio.Task[int] | None = None

    @property
    def outage(self) -> str | None:
        """Why the embedder's last call failed (e.g. ``"RateLimitError"``), while it keeps
        failing; None once a call succeeds. Meanwhile passages are stored without a vector
        and searches rank by keyword only."""
        return None if self.embedder is None else _OUTAGES.get(self.embedder.name)

    async def _embed(self, texts: list[str]) -> list[list[float]] | None:
        """The embedder's vectors for ``texts``, or None when it raised (an outage: warned
        once, until a call succeeds again)."""
        assert self.embedder is not None
        name = self.embedder.name
        try:
            vectors = await self.embedder.embed(texts)
        except Exception as exc:  # e.g. HTTP 429: keyword search still answers
            if name not in _OUTAGES:
                log.warning(
                    "embedder %s failed (%s: %s): passages are stored without a vector and "
                    "searches rank by keyword until it recovers; Memory.tidy embeds them later",
                    name,
                    type(exc).__name__,
                    exc,
                )
            _OUTAGES[name] = type(exc).__name__
            return None
        if _OUTAGES.pop(name, None) is not None:
            log.info("embedder %s recovered", name)
        return vectors

    async def refresh(self) -> None:
        """Read what was written since the last refresh (by any writer)."""
        reloaded, records = await self._log.refresh()
        vectors = self._vectors
        if reloaded:
            self._index, self.passages, self._by_id = BM25Index(), [], {}
            vectors = self._vectors = None if vectors is None else NumpyVectors(vectors.np)
        for r in records:
            kind = r.get("kind")
            if kind == "passage" and r["id"] not in self._by_id:
                packed = stored_vector(r.get("vector"))
                doc = len(self.passages)
                self._by_id[r["id"]] = doc
                self._index.add(doc, r["content"] + " " + " ".join(r["tags"]))
                passage = Passage(
                    r["id"],
                    r["content"],
                    tuple(r["tags"]),
                    r["metadata"],
                    r["at"],
                    r.get("valid_to"),
                    None,
                    r.get("embedder"),
                    packed,
                )
                self.passages.append(passage)
                if vectors is not None:
                    vectors.add(
                        doc,
                        at=passage.at,
                        valid_to=passage.valid_to,
                        tags=passage.tags,
                        embedder=passage.embedder,
                        vector=None if packed is None else vectors.decode(packed),
                    )
            elif kind == "vector" and r["id"] in self._by_id:
                at = self._by_id[r["id"]]
                packed = stored_vector(r["vector"]) or b""
                self.passages[at] = replace(
                    self.passages[at], embedder=r["embedder"], packed=packed
                )
                if vectors is not None:
                    vectors.set_vector(at, r["embedder"], vectors.decode(packed))
            elif kind == "current" and r["id"] in self._by_id:
                at = self._by_id[r["id"]]
                self.passages[at] = replace(
                    self.passages[at], superseded_by=None, expired_at=None, valid_to=r["valid_to"]
                )
                if vectors is not None:
                    vectors.reassert(at, r["valid_to"])
            elif kind == "expired" and r["id"] in self._by_id:
                at = self._by_id[r["id"]]
                self.passages[at] = replace(self.passages[at], expired_at=r["at"])
            elif kind == "supersede" and r["id"] in self._by_id:
                at = self._by_id[r["id"]]
                by = self._by_id.get(r["by"])
                # Not by a passage superseded meanwhile: two writers superseding each other's
                # fact at once left both inactive (test_racing_supersedes_leave_one_fact_current).
                if self.passages[at].superseded_by is None and (
                    by is None or self.passages[by].superseded_by is None
                ):
                    self.passages[at] = replace(self.passages[at], superseded_by=r["by"])
                    if vectors is not None:
                        vectors.supersede(at)

    @property
    def vector_ranking(self) -> Literal["numpy", "python"]:
        """How search ranks by vector: with numpy (installed, e.g. by the extra
        ``memory-vector``) or in pure Python; both return the same passages in the same order."""
        return "python" if self._vectors is None else "numpy"

    async def get(self, passage_id: str) -> Passage | None:
        """The passage ``passage_id``, or None."""
        await self.refresh()
        at = self._by_id.get(passage_id)
        return None if at is None else self.passages[at]

    async def insert(
        self,
        content: str,
        tags: Sequence[str] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        supersedes: str | None = None,
        valid_to: float | None = None,
    ) -> Passage:
        """Archive ``content`` (returns the existing passage for a duplicate, made current
        again, with ``valid_to``, when it was superseded or past its validity). With
        ``supersedes``, the passage of that id is kept but marked superseded by this one."""
        if not isinstance(content, str) or not content.strip():
            raise MemoryEditError("content must be non-empty text")
        if len(content) > MAX_CONTENT:
            raise MemoryEditError(
                f"content must be at most {MAX_CONTENT:,} characters, got {len(content):,}: "
                "store the facts that matter, one passage each"
            )
        checked = check_tags(tags)
        if valid_to is not None and (
            isinstance(valid_to, bool) or not isinstance(valid_to, int | float)
        ):
            raise MemoryEditError(f"valid_to must be epoch seconds or None, got {valid_to!r}")
        if metadata is not None and not isinstance(metadata, dict):
            raise MemoryEditError(f"metadata must be a dict, got {metadata!r}")
        await self.refresh()
        passage_id = content_id(content)
        if supersedes is not None and supersedes not in self._by_id:
            raise MemoryEditError(f"no passage {supersedes!r} to supersede")
        if supersedes == passage_id:
            raise MemoryEditError("a passage cannot supersede itself")
        records: list[dict[str, Any]] = []
        now = self._clock()
        existing = self._by_id.get(passage_id)
        if existing is not None and not self.passages[existing].active(now):
            # A re-asserted fact is current; with supersedes=, both ended inactive
            # (test_reasserting_a_fact_makes_it_current).
            records.append({"kind": "current", "id": passage_id, "at": now, "valid_to": valid_to})
        if existing is None:
            vector, embedded_by = None, None
            if self.embedder is not None and (vectors := await self._embed([content])):
                vector, embedded_by = vectors[0], self.embedder.name
            records.append(
                {
                    "kind": "passage",
                    "id": passage_id,
                    "content": content,
                    "tags": list(checked),
                    "metadata": metadata or {},
                    "at": self._clock(),
                    "valid_to": valid_to,
                    "embedder": embedded_by,
                    "vector": None if vector is None else pack_vector(vector),
                }
            )
        if supersedes is not None:
            records.append(
                {"kind": "supersede", "id": supersedes, "by": passage_id, "at": self._clock()}
            )
        if records:
            await self._log.append(*records)
        found = await self.get(passage_id)
        assert found is not None
        return found

    async def delete(self, passage_id: str) -> None:
        """Erase passage ``passage_id`` for good: its record, its vectors and its marks are
        replaced in the store by empty tombstones in one call (not superseded: nothing of its
        text stays in the store's rows), and every reader drops it at its next read. A passage
        it superseded stays superseded. Erasing again removes what a racing writer stored for
        it after. Raises MemoryEditError when no record names ``passage_id`` or the store
        cannot rewrite in place."""

        def change(record: dict[str, Any]) -> dict[str, Any] | None:
            if record.get("id") == passage_id and record.get("kind") != "erased":
                return dict(ERASED)
            if record.get("kind") == "supersede" and record.get("by") == passage_id:
                return {**record, "by": "erased"}
            return None

        erased = await self._log.erase(change)
        await self.refresh()
        if not erased:
            raise MemoryEditError(f"no passage {passage_id!r} to delete")

    async def reembed(self, batch: int = 100) -> int:
        """Embed, with the current embedder, every passage stored without a vector of its
        (e.g. after changing the embedder, or stored while the embedder failed); return how
        many. Until then such passages are found by keyword only. Stops at the first failed
        batch (the next run resumes there). Safe to run while others write; run it off the
        request path."""
        if self.embedder is None:
            raise MemoryEditError("reembed needs an embedder: pass embedder= to Memory")
        await self.refresh()
        name = self.embedder.name
        todo = [p for p in self.passages if p.embedder != name]
        for start in range(0, len(todo), batch):
            part = todo[start : start + batch]
            vectors = await self._embed([p.content for p in part])
            if vectors is None:  # an outage: the next run resumes here
                await self.refresh()
                return start
            await self._log.append(
                *[
                    {"kind": "vector", "id": p.id, "embedder": name, "vector": pack_vector(v)}
                    for p, v in zip(part, vectors, strict=True)
                ]
            )
            await asyncio.sleep(0)  # let other tasks (turns) run between batches
        await self.refresh()
        return len(todo)

    def reembed_in_background(self, batch: int = 100) -> asyncio.Task[int]:
        """``reembed`` as an asyncio task (the running one, if any): await it for the count
        or cancel it. Each batch is stored when done, so a cancelled or failed re-embedding
        resumes where it stopped at the next call."""
        if self.embedder is None:
            raise MemoryEditError("reembed needs an embedder: pass embedder= to Memory")
        if self._reembedding is None or self._reembedding.done():
            self._reembedding = asyncio.create_task(self.reembed(batch))
        return self._reembedding

    async def expire(self) -> list[str]:
        """Mark every passage past its ``valid_to`` expired (kept, not deleted; search
        already skips it); return the ids newly marked."""
        await self.refresh()
        now = self._clock()
        ids = [
            p.id
            for p in self.passages
            if p.valid_to is not None and p.valid_to <= now and p.expired_at is None
        ]
        if ids:
            await self._log.append(*[{"kind": "expired", "id": i, "at": now} for i in ids])
            await self.refresh()
        return ids

    async def dedupe(self) -> list[str]:
        """Supersede each active passage by the newest active one with the same text (case,
        spacing and punctuation at the ends of words aside: ``same_text_key``); return the
        superseded ids."""
        await self.refresh()
        now = self._clock()
        newest: dict[tuple[str, ...], Passage] = {}
        records: list[dict[str, Any]] = []
        for p in reversed(self.passages):
            if p.active(now):
                kept = newest.setdefault(same_text_key(p.content), p)
                if kept is not p:
                    records.append({"kind": "supersede", "id": p.id, "by": kept.id, "at": now})
        if records:
            await self._log.append(*records)
            await self.refresh()
        return [r["id"] for r in records]

    async def search(
        self,
        query: str,
        *,
        tags: Sequence[str] | None = None,
        tag_match_mode: Literal["any", "all"] = "any",
        top_k: int = 5,
        start: float | None = None,
        end: float | None = None,
        include_inactive: bool = False,
        min_score: float | None = None,
        recency: float = 0.0,
        half_life: float = HALF_LIFE,
    ) -> list[Passage]:
        """The ``top_k`` passages best matching ``query``: BM25 and (with an embedder) cosine
        over stored vectors of the same embedder, fused by reciprocal rank. Filters (tags,
        time range, active unless ``include_inactive``) apply before ranking.

        ``min_score`` drops passages whose cosine similarity to the query is below it from
        the vector ranking (keyword matches, which share a word with the query, stay).
        ``recency`` (0 to 1) mixes freshness into the order: each hit scores ``(1 - recency)
        * relevance + recency * 0.5 ** (age / half_life)``, relevance being its fused score
        over the best possible one. When the embedder fails, ranks by keyword only (see
        ``outage``)."""
        if tag_match_mode not in ("any", "all"):
            raise MemoryEditError(f"tag_match_mode must be 'any' or 'all', got {tag_match_mode!r}")
        if min_score is not None and (
            isinstance(min_score, bool) or not isinstance(min_score, int | float)
        ):
            raise MemoryEditError(f"min_score must be a number or None, got {min_score!r}")
        if (
            isinstance(recency, bool)
            or not isinstance(recency, int | float)
            or not 0 <= recency <= 1
        ):
            raise MemoryEditError(f"recency must be a weight from 0 to 1, got {recency!r}")
        if isinstance(half_life, bool) or not isinstance(half_life, int | float) or half_life <= 0:
            raise MemoryEditError(f"half_life must be positive seconds, got {half_life!r}")
        wanted = set(check_tags(tags))
        await self.refresh()
        now = self._clock()

        def keep(doc: int) -> bool:
            p = self.passages[doc]
            if not include_inactive and not p.active(now):
                return False
            if (start is not None and p.at < start) or (end is not None and p.at > end):
                return False
            if wanted:
                have = wanted & set(p.tags)
                return have == wanted if tag_match_mode == "all" else bool(have)
            return True

        if not query.strip():  # filters only: newest first
            kept = [doc for doc in range(len(self.passages)) if keep(doc)]
            return [self.passages[doc] for doc in reversed(kept)][:top_k]
        depth = max(CANDIDATES, top_k * 4)
        rankings = [[doc for doc, _ in self._index.search(query, where=keep, top_k=depth)]]
        probes = None if self.embedder is None else await self._embed([query])
        if self.embedder is not None and probes:
            name = self.embedder.name
            probe = unit(probes[0])
            ranked = None
            if self._vectors is not None:
                filters = Filters(
                    now, start, end, frozenset(wanted), tag_match_mode, include_inactive
                )
                ranked = self._vectors.rank(
                    name,
                    probe,
                    filters,
                    depth,
                    lambda doc: dot(probe, self.passages[doc].vector or ()),
                )
            if ranked is None:  # pure Python: the reference the numpy ranking equals
                scored = [
                    (dot(probe, unpack_vector(p.packed)), doc)
                    for doc, p in enumerate(self.passages)
                    if p.packed is not None and p.embedder == name and keep(doc)
                ]
                scored.sort(key=lambda pair: (-pair[0], pair[1]))
                ranked = [doc for _score, doc in scored[:depth]]
            if min_score is not None:
                ranked = [
                    d for d in ranked if dot(probe, self.passages[d].vector or ()) >= min_score
                ]
            rankings.append(ranked)
        if not recency:
            return [self.passages[doc] for doc in reciprocal_rank_fusion(rankings)[:top_k]]
        best = len(rankings) / (60 + 1)  # fused_scores (k=60) of a hit first in every ranking

        def mixed(pair: tuple[int, float]) -> tuple[float, int]:
            doc, fused = pair
            fresh = 0.5 ** (max(0.0, now - self.passages[doc].at) / half_life)
            return -((1 - recency) * fused / best + recency * fresh), doc

        ranked_docs = sorted(fused_scores(rankings).items(), key=mixed)
        return [self.passages[doc] for doc, _ in ranked_docs[:top_k]]
