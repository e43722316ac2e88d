"""A small Okapi BM25 index kept in memory, and the word tokens it ranks by.

Used by the in-memory backend's text search (:attr:`Capability.TEXT_SEARCH`, the index kept in
the store) and by ``agent_sessions.memory`` (recall and archival keyword search)."""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import islice

from .textsearch import tokens as tokenize


class BM25Index:
    """Okapi BM25 over documents added by integer id (k1=1.2, b=0.75), kept in memory."""

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._postings: dict[str, dict[int, int]] = {}
        self._lengths: dict[int, int] = {}
        self._total = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, doc: int, text: str) -> None:
        """Index ``text`` as document ``doc`` (ids are never re-added)."""
        terms = tokenize(text)
        postings = self._postings
        for term in terms:  # the cold load's hot loop: no Counter, one lookup per token
            counts = postings.get(term)
            if counts is None:
                postings[term] = {doc: 1}
            else:
                counts[doc] = counts.get(doc, 0) + 1
        self._lengths[doc] = len(terms)
        self._total += len(terms)

    def remove(self, doc: int, text: str) -> None:
        """Drop document ``doc``, added with ``text``."""
        length = self._lengths.pop(doc, None)
        if length is None:
            return
        self._total -= length
        for term in set(tokenize(text)):
            postings = self._postings.get(term, {})
            postings.pop(doc, None)
            if not postings:
                self._postings.pop(term, None)

    def search(
        self, query: str, *, where: Callable[[int], bool] | None = None, top_k: int = 10
    ) -> list[tuple[int, float]]:
        """The ``top_k`` best ``(doc, score)`` for ``query`` among documents passing
        ``where``, best first; ties keep the older document first. ``where`` is asked of hits in
        rank order, each once, until ``top_k`` pass (the same result as filtering first)."""
        n = len(self._lengths)
        if not n or top_k <= 0:
            return []
        average = self._total / n or 1.0
        scores: dict[int, float] = {}
        for term in set(tokenize(query)):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            for doc, freq in postings.items():
                norm = self.k1 * (1 - self.b + self.b * self._lengths[doc] / average)
                scores[doc] = scores.get(doc, 0.0) + idf * freq * (self.k1 + 1) / (freq + norm)
        ranked = sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
        if where is None:
            return ranked[:top_k]
        return list(islice((pair for pair in ranked if where(pair[0])), top_k))


__all__ = ["BM25Index", "tokenize"]
