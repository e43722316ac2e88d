"""Capability tiers: one class per optional capability, each skipping sessions without it.

``SequencingConformance`` (sequence numbers) and ``RangeDeleteConformance`` (atomic deletion
below a sequence number) live here; the rewrite-in-place and family tiers live in their own
modules.
"""

from __future__ import annotations

from typing import Any

import pytest

from ._kit import (
    ConformanceBase,
    SessionFactory,
    close_quietly,
    offers_range_delete,
    offers_sequencing,
)
from ._kit import msg as _msg
from .helpers import item_text, texts


class SequencingConformance(ConformanceBase):
    """Sequence numbers: increasing in commit order, never reused, ranged reads and counts."""

    @pytest.mark.asyncio
    async def test_sequence_numbers_when_offered(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not offers_sequencing(s):
            pytest.skip("the session does not offer sequenced items")
        first = await s.add_sequenced_items([_msg("a"), _msg("b")])
        second = await s.add_sequenced_items([_msg("c")])
        assert len(first) == 2 and len(second) == 1
        assert first[0] < first[1] < second[0]
        popped = await s.pop_item()
        assert item_text(popped) == "c"
        third = await s.add_sequenced_items([_msg("d")])
        assert third[0] > second[0], "a popped sequence number must not be reused"
        pairs = await s.get_sequenced_items()
        assert [seq for seq, _ in pairs] == [first[0], first[1], third[0]]
        assert texts(i for _, i in await s.get_sequenced_items(after=first[0])) == ["b", "d"]
        assert texts(i for _, i in await s.get_sequenced_items(before=third[0])) == ["a", "b"]
        assert texts(i for _, i in await s.get_sequenced_items(1, before=third[0])) == ["b"]
        assert await s.count_items() == 3
        assert await s.count_items(after=first[0]) == 2
        assert await s.count_items(after=first[0], before=third[0]) == 1
        assert await s.add_sequenced_items([]) == []

    @pytest.mark.asyncio
    async def test_two_objects_share_one_numbering(self, new_session: SessionFactory) -> None:
        s: Any = await new_session("numbered")
        if not offers_sequencing(s):
            pytest.skip("the session does not offer sequenced items")
        other: Any = await self.create_session(s.session_id)
        try:
            seqs = await s.add_sequenced_items([_msg("a"), _msg("b")])
            assert [seq for seq, _ in await other.get_sequenced_items()] == seqs
            assert item_text(await other.pop_item()) == "b"
            later = await s.add_sequenced_items([_msg("c")])
            assert later[0] > seqs[1], "a number popped through another object was reused"
            pairs = await other.get_sequenced_items()
            assert [(seq, item_text(item)) for seq, item in pairs] == [
                (seqs[0], "a"), (later[0], "c")
            ]
        finally:
            await close_quietly(other)


class RangeDeleteConformance(ConformanceBase):
    """``delete_items(before=seq)``: atomic, exact, numbers never restart after a clear."""

    @pytest.mark.asyncio
    async def test_range_delete_when_offered(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not offers_range_delete(s):
            pytest.skip("the session does not offer range deletion")
        seqs = await s.add_sequenced_items([_msg(str(i)) for i in range(6)])
        assert await s.delete_items(before=seqs[0]) == 0
        assert await s.delete_items(before=seqs[3]) == 3
        assert texts(await s.get_items()) == ["3", "4", "5"]
        assert await s.delete_items(before=seqs[3]) == 0
        other = await new_session()
        await other.add_items([_msg("untouched")])
        await s.clear_session()
        after_clear = await s.add_sequenced_items([_msg("new")])
        assert after_clear[0] > seqs[-1], "numbers must not restart after clear_session"
        assert await s.delete_items(before=seqs[-1] + 1) == 0  # a stale purge spares new items
        assert texts(await s.get_items()) == ["new"]
        assert texts(await other.get_items()) == ["untouched"]

    @pytest.mark.asyncio
    async def test_range_delete_rejects_a_bound_that_is_not_an_int(
        self, new_session: SessionFactory
    ) -> None:
        s: Any = await new_session()
        if not offers_range_delete(s):
            pytest.skip("the session does not offer range deletion")
        seqs = await s.add_sequenced_items([_msg(str(i)) for i in range(3)])
        for bad in (None, "zzz", str(seqs[-1] + 1), float(seqs[1]) + 0.5, True):
            with pytest.raises(TypeError, match="before"):
                await s.delete_items(before=bad)
        assert texts(await s.get_items()) == ["0", "1", "2"], "a bad bound must delete nothing"
