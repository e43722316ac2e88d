"""The compaction view as last read, kept up to date by reading only the items written since.

The newest known item still being stored (same number, same content) proves every older known
item is too (pops take the newest first; numbers are never reused); anything else means a full
read. See docs/compaction.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..branching.store import read_rows
from .tokens import TokenEstimator

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import Session


@dataclass
class RunningView:
    """A record's summary, then the inner items after its boundary with their token counts
    (handed to the trigger uncopied: a copy would make every check O(history))."""

    record_id: str | None
    generation: int
    view: list[TResponseInputItem] = field(default_factory=list)
    """The summary items, then the inner items after the boundary."""
    seqs: list[int] = field(default_factory=list)
    """Sequence numbers of the inner items (the end of ``view``)."""
    counts: list[int] = field(default_factory=list)
    candidates: list[TResponseInputItem] = field(default_factory=list)
    """``view`` without user messages and compaction items (the SDK's candidates)."""
    tokens: int = 0
    """Estimated tokens of the inner items (the summary is not included)."""
    prefetched: tuple[int, list[tuple[int, TResponseInputItem]]] | None = None
    """(after, pairs): a read of the items after ``after`` made by the caller, used once."""

    @property
    def tail(self) -> list[TResponseInputItem]:
        """The inner items after the boundary."""
        return self.view[len(self.view) - len(self.seqs) :]

    def unchanged(self, view_len: int, candidates_len: int) -> bool:
        """Whether the lists still have the lengths they had (a trigger may have mutated them)."""
        return (len(self.view), len(self.candidates)) == (view_len, candidates_len) and len(
            self.view
        ) >= len(self.seqs)

    async def extend(
        self,
        pairs: list[tuple[int, TResponseInputItem]],
        estimator: TokenEstimator,
        known: dict[int, int] | None = None,
    ) -> None:
        """Append newly read ``(seq, item)`` pairs, counting the tokens of those whose count
        ``known`` (by sequence number) lacks."""
        if not pairs:
            return
        known = known or {}
        fresh = iter(await estimator.count_items([i for seq, i in pairs if seq not in known]))
        for seq, item in pairs:
            self.seqs.append(seq)
            self.view.append(item)
            self.counts.append(known[seq] if seq in known else next(fresh))
            self.tokens += self.counts[-1]
            if not _user_or_compaction(item):
                self.candidates.append(item)


async def refresh(
    known: RunningView | None,
    inner: Session,
    *,
    record_id: str | None,
    summary: list[TResponseInputItem],
    boundary: int | None,
    generation: int,
    incremental: bool,
    estimator: TokenEstimator,
) -> RunningView:
    """Return the view after ``boundary``: ``known`` extended by the new items when it is
    provably still valid (``incremental`` and same record and generation), else a full read
    (reusing ``known``'s token counts by sequence number)."""
    if (
        incremental
        and known is not None
        and (known.record_id, known.generation) == (record_id, generation)
    ):
        if not known.seqs:
            await known.extend(await read_rows(inner, after=boundary), estimator)
            return known
        newest = known.seqs[-1]
        prefetched, known.prefetched = known.prefetched, None
        if prefetched is not None and prefetched[0] == newest - 1:
            pairs = prefetched[1]
        else:
            pairs = await read_rows(inner, after=newest - 1)
        if pairs and pairs[0][0] == newest and pairs[0][1] == known.view[-1]:
            await known.extend(pairs[1:], estimator)
            return known
    fresh = RunningView(record_id, generation, view=list(summary))
    fresh.candidates = [item for item in summary if not _user_or_compaction(item)]
    cached = dict(zip(known.seqs, known.counts, strict=True)) if known is not None else None
    await fresh.extend(await read_rows(inner, after=boundary), estimator, cached)
    return fresh


def _user_or_compaction(item: Any) -> bool:
    """Items the SDK does not count as compaction candidates."""
    return isinstance(item, dict) and (
        item.get("role") == "user" or item.get("type") == "compaction"
    )
