"""Ranking: a small BM25 index, exact cosine similarity, reciprocal-rank fusion."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat

_WORD = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens of ``text``."""
    return _WORD.findall(text.lower())


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
        ``where`` (filtered before ranking), best first; ties keep the older document first."""
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
                if where is not None and not where(doc):
                    continue
                norm = self.k1 * (1 - self.b + self.b * self._lengths[doc] / average)
                scores[doc] = scores.get(doc, 0.0) + idf * freq * (self.k1 + 1) / (freq + norm)
        ranked = sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
        return ranked[:top_k]


def unit(vector: Sequence[float]) -> tuple[float, ...]:
    """``vector`` scaled to length 1 (unchanged when zero), so a dot product is a cosine."""
    # map with operator functions: the same float operations in the same order as a generator
    # (so the same result to the last bit), about 1.8x faster, which the archive's cold load
    # (one call per stored vector) feels.
    norm = math.sqrt(sum(map(operator.mul, vector, vector)))
    return tuple(map(operator.truediv, vector, repeat(norm))) if norm else tuple(vector)


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The dot product of two vectors of equal length."""
    if len(a) != len(b):
        raise ValueError(f"vectors of different lengths: {len(a)} and {len(b)}")
    return float(sum(map(operator.mul, a, b)))


def reciprocal_rank_fusion(rankings: Iterable[Sequence[int]], k: int = 60) -> list[int]:
    """Fuse ranked id lists: score each id by the sum of 1/(k + rank); best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return [doc for doc, _ in sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))]
