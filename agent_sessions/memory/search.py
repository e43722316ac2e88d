"""Ranking: a small BM25 index (``core.bm25``, re-exported here), exact cosine similarity,
reciprocal-rank fusion."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence

from ..core.bm25 import BM25Index, tokenize

__all__ = ["BM25Index", "dot", "reciprocal_rank_fusion", "tokenize", "unit"]


def unit(vector: Sequence[float]) -> tuple[float, ...]:
    """``vector`` scaled to length 1 (unchanged when zero), so a dot product is a cosine."""
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(x / norm for x in vector) if norm else tuple(vector)


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
