"""Exact vector ranking for archival search with numpy (extra ``memory-vector``).

Without numpy, ``Archive`` ranks in pure Python: a dot product per kept passage, then a sort.
``NumpyVectors`` gives the same ranking, order included, about 100x faster (see docs/memory.md):
the unit vectors of each embedder sit in a float32 matrix and the filters (validity, time range,
tags) in columns, both kept in the archive object and updated as records arrive, so a search is
one mask and one matrix-vector product. float32 scores can misorder passages whose cosines
differ by less than their rounding error, so every passage within twice that error bound of the
cut-off is re-scored with the same float64 ``dot`` as the pure-Python path, which then decides
the order: the numpy result is the pure-Python result.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

EXTRA = "memory-vector"
"""The extra that installs numpy for this module."""


def load_numpy() -> ModuleType | None:
    """numpy, or None when it is not installed (the archive then ranks in pure Python)."""
    try:
        return importlib.import_module("numpy")
    except ImportError:
        return None


@dataclass(frozen=True)
class Filters:
    """What a search keeps before ranking (the same rules as ``Archive.search``'s ``keep``)."""

    now: float
    start: float | None
    end: float | None
    tags: frozenset[str]
    tag_match_mode: Literal["any", "all"]
    include_inactive: bool


class _Matrix:
    """The unit vectors of one embedder: float32 rows in a buffer that doubles when full,
    with the passage (doc) of each row (-1: the passage moved to another embedder)."""

    def __init__(self, np: Any, dim: int) -> None:
        self.np, self.dim = np, dim
        self.rows: Any = np.empty((16, dim), dtype=np.float32)
        self.docs: Any = np.full(16, -1, dtype=np.int64)
        self.count = 0
        self.row_of: dict[int, int] = {}
        self.pending: dict[int, Sequence[float] | None] = {}
        """Changes not yet in ``rows`` (None: drop), applied in one step by ``flush``."""
        self.live = 0

    def flush(self) -> None:
        np = self.np
        pending, self.pending = self.pending, {}
        added = []
        for doc, vector in pending.items():
            row = self.row_of.get(doc)
            if row is None:
                if vector is not None:
                    added.append((doc, vector))
            elif vector is None:
                self.docs[row] = -1
                del self.row_of[doc]
                self.live -= 1
            else:
                self.rows[row] = vector
        if not added:
            return
        need = self.count + len(added)
        if need > len(self.docs):
            size = max(need, 2 * len(self.docs))
            rows = np.empty((size, self.dim), dtype=np.float32)
            rows[: self.count] = self.rows[: self.count]
            docs = np.full(size, -1, dtype=np.int64)
            docs[: self.count] = self.docs[: self.count]
            self.rows, self.docs = rows, docs
        self.rows[self.count : need] = np.asarray([v for _, v in added], dtype=np.float32)
        self.docs[self.count : need] = [doc for doc, _ in added]
        for row, (doc, _) in enumerate(added, start=self.count):
            self.row_of[doc] = row
        self.count = need
        self.live += len(added)


class NumpyVectors:
    """The archive's passages as columns and per-embedder matrices, for exact ranking with
    numpy. Fed by ``Archive.refresh`` (``add``, ``set_vector``, ``supersede``, ``reassert``)
    in doc order."""

    def __init__(self, np: ModuleType) -> None:
        self.np: Any = np
        self._size = 0
        self._at: Any = np.empty(16, dtype=np.float64)
        self._valid_to: Any = np.empty(16, dtype=np.float64)  # +inf: no end
        self._superseded: Any = np.zeros(16, dtype=bool)
        self._tagged: dict[str, list[int]] = {}
        self._matrices: dict[str, _Matrix] = {}
        self._name_of: dict[int, str] = {}
        self._broken: set[str] = set()
        """Embedders with vectors of more than one length: ranked in pure Python, which raises
        as it always did when it meets one."""

    @classmethod
    def create(cls) -> NumpyVectors | None:
        """An empty index, or None without numpy."""
        np = load_numpy()
        return None if np is None else cls(np)

    def decode(self, packed: bytes) -> Any:
        """A read-only float32 array over ``packed`` (``Passage.packed``), no copy."""
        return self.np.frombuffer(packed, dtype="<f4")

    def _grow(self, need: int) -> None:
        np = self.np
        if need <= len(self._at):
            return
        size = max(need, 2 * len(self._at))
        for name, fill in (("_at", 0.0), ("_valid_to", np.inf), ("_superseded", False)):
            old = getattr(self, name)
            new = np.full(size, fill, dtype=old.dtype)
            new[: self._size] = old[: self._size]
            setattr(self, name, new)

    def add(
        self,
        doc: int,
        *,
        at: float,
        valid_to: float | None,
        tags: Collection[str],
        embedder: str | None,
        vector: Sequence[float] | None,
    ) -> None:
        """Passage ``doc`` (the next one: docs come in order 0, 1, 2...)."""
        if doc != self._size:
            raise ValueError(f"passage {doc} added out of order (expected {self._size})")
        self._grow(doc + 1)
        self._at[doc] = at
        self._valid_to[doc] = self.np.inf if valid_to is None else valid_to
        self._superseded[doc] = False
        self._size = doc + 1
        for tag in tags:
            self._tagged.setdefault(tag, []).append(doc)
        if embedder is not None and vector is not None:
            self.set_vector(doc, embedder, vector)

    def set_vector(self, doc: int, embedder: str, vector: Sequence[float]) -> None:
        """The unit vector of ``doc`` is now ``vector``, of ``embedder``."""
        previous = self._name_of.get(doc)
        if previous is not None and previous != embedder:
            self._matrices[previous].pending[doc] = None
        self._name_of[doc] = embedder
        matrix = self._matrices.get(embedder)
        if matrix is None:
            matrix = self._matrices[embedder] = _Matrix(self.np, len(vector))
        if len(vector) != matrix.dim:
            self._broken.add(embedder)
        else:
            matrix.pending[doc] = vector

    def supersede(self, doc: int) -> None:
        """``doc`` is superseded (inactive from now on)."""
        self._superseded[doc] = True

    def reassert(self, doc: int, valid_to: float | None) -> None:
        """``doc`` is current again (not superseded), valid until ``valid_to``."""
        self._superseded[doc] = False
        self._valid_to[doc] = self.np.inf if valid_to is None else valid_to

    def mask(self, filters: Filters) -> Any:
        """A bool per passage: kept by ``filters``."""
        np, n = self.np, self._size
        keep = np.ones(n, dtype=bool)
        if not filters.include_inactive:
            keep &= ~self._superseded[:n]
            keep &= self._valid_to[:n] > filters.now
        if filters.start is not None:
            keep &= self._at[:n] >= filters.start
        if filters.end is not None:
            keep &= self._at[:n] <= filters.end
        if filters.tags:
            tagged = np.zeros(n, dtype=bool)
            for tag in filters.tags:
                if filters.tag_match_mode == "all":
                    tagged[:] = False
                tagged[self._tagged.get(tag, [])] = True
                if filters.tag_match_mode == "all":
                    keep &= tagged
            if filters.tag_match_mode == "any":
                keep &= tagged
        return keep

    def rank(
        self,
        embedder: str,
        probe: Sequence[float],
        filters: Filters,
        depth: int,
        exact: Callable[[int], float],
    ) -> list[int] | None:
        """The ``depth`` kept passages of ``embedder`` closest to the unit vector ``probe``,
        best first, ties by doc; exactly what the pure-Python ranking with ``exact`` (the
        float64 dot product with a passage) returns. None when this index cannot answer (a
        probe or stored vectors of another length): rank in pure Python then."""
        np = self.np
        matrix = self._matrices.get(embedder)
        if matrix is None:
            return []
        if embedder in self._broken or len(probe) != matrix.dim:
            return None
        matrix.flush()
        if not matrix.live or depth <= 0:
            return []
        docs = matrix.docs[: matrix.count]
        kept = np.append(self.mask(filters), False)[docs]  # row -1 (moved) → the False
        total = int(kept.sum())
        if not total:
            return []
        scores = matrix.rows[: matrix.count] @ np.asarray(probe, dtype=np.float32)
        scores[~kept] = -np.inf
        k = min(depth, total)
        cut = np.partition(scores, -k)[-k]
        # |float32 score - float64 score| <= error for unit vectors (dim terms of rounding
        # 2^-24 each, plus rounding the inputs to float32): every passage of the true top
        # `depth` scores at least cut - 2 * error in float32.
        error = (matrix.dim + 8) * 2.0**-24
        candidates = docs[scores >= cut - 2 * error].tolist()
        scored = sorted(((exact(doc), doc) for doc in candidates), key=lambda p: (-p[0], p[1]))
        return [doc for _score, doc in scored[:depth]]


__all__ = ["EXTRA", "Filters", "NumpyVectors", "load_numpy"]
