"""Capability tiers: one class per optional capability, each skipping sessions without it.

``SequencingConformance`` (sequence numbers), ``RangeDeleteConformance`` (atomic deletion
below a sequence number), ``SequencedWriteConformance`` (writes at given numbers),
``GuardedWriteConformance`` (writes while another session is unchanged) and
``CheckedPopConformance`` (a pop a check can refuse) live here; the rewrite-in-place and
family tiers live in their own modules.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from ..core.capabilities import Capability, supports
from ..core.catalog import CatalogQuery, SupportsCatalog
from ..core.family import close_quietly, side_store
from ..errors import InvalidItemError, SequenceConflictError
from ._kit import (
    ConformanceBase,
    SessionFactory,
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


class SequencedWriteConformance(ConformanceBase):
    """``write_sequenced_items``: an empty session filled at given numbers and times, in one
    step; later appends number above them; a session holding items is refused."""

    @pytest.mark.asyncio
    async def test_writes_at_given_numbers_and_times(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not supports(s, Capability.SEQUENCED_WRITE):
            pytest.skip("the session does not offer sequenced writes")
        base = _numbers_base()
        seqs = [base + 3, base + 4, base + 7, base + 20]
        created = datetime(2020, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
        updated = datetime(2021, 6, 7, 8, 9, 10, tzinfo=timezone.utc)
        await s.write_sequenced_items(
            [(seq, _msg(str(i))) for i, seq in enumerate(seqs)],
            created_at=created,
            updated_at=updated,
        )
        pairs = await s.get_sequenced_items()
        assert [(seq, item_text(item)) for seq, item in pairs] == [
            (seq, str(i)) for i, seq in enumerate(seqs)
        ]
        assert await s.count_items(after=base + 4) == 2
        assert texts(i for _, i in await s.get_sequenced_items(1, before=base + 20)) == ["2"]
        if isinstance(s, SupportsCatalog):
            sid: str = getattr(s, "session_id")  # noqa: B009
            query = CatalogQuery(limit=1, prefix=sid, internal=True)
            (info,) = await s.catalog_store().list_page(query)
            assert (info.created_at, info.updated_at) == (created, updated)
        assert item_text(await s.pop_item()) == "3"
        later = await s.add_sequenced_items([_msg("new")])
        assert later[0] > seqs[-1], "an append reused a number written at"

    @pytest.mark.asyncio
    async def test_refuses_a_session_holding_items(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not supports(s, Capability.SEQUENCED_WRITE):
            pytest.skip("the session does not offer sequenced writes")
        base = _numbers_base()
        await s.add_items([_msg("kept")])
        with pytest.raises(SequenceConflictError, match="already holds 1 item"):
            await s.write_sequenced_items([(base, _msg("x"))])
        assert texts(await s.get_items()) == ["kept"]
        await s.clear_session()
        await s.write_sequenced_items([(base, _msg("x"))])  # empty again: accepted
        assert [seq for seq, _ in await s.get_sequenced_items()] == [base]

    @pytest.mark.asyncio
    async def test_bad_input_writes_nothing(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not supports(s, Capability.SEQUENCED_WRITE):
            pytest.skip("the session does not offer sequenced writes")
        base = _numbers_base()
        with pytest.raises(InvalidItemError, match="item 1 "):
            await s.write_sequenced_items([(base, _msg("a")), (base + 1, {"x": float("nan")})])
        for bad in ([(base + 1, _msg("a")), (base, _msg("b"))], [(0, _msg("a"))]):
            with pytest.raises(ValueError, match="nothing was written"):
                await s.write_sequenced_items(bad)
        with pytest.raises(TypeError):
            await s.write_sequenced_items([("1", _msg("a"))])
        assert await s.get_items() == []
        await s.write_sequenced_items([])
        assert await s.count_items() == 0


def _numbers_base() -> int:
    """Numbers no other test uses (one SQLite layout numbers items across the whole file)."""
    return 10**9 + random.randrange(10**6) * 1000


class _StubCompactions:
    """``client.responses.compact`` for the SDK's compaction session: no network."""

    def __init__(self) -> None:
        self.output: list[Any] = []

    async def compact(self, **_: Any) -> Any:
        return SimpleNamespace(output=list(self.output), usage=None)


def _summary(text: str) -> Any:
    return {"type": "compaction", "id": f"cmp_{text}", "encrypted_content": text}


class GuardedWriteConformance(ConformanceBase):
    """``append_if_newest``/``pop_if_newest``: a write happens only while the guard's newest
    number is the one given; a declined call (guard changed, or the store cannot check in
    one step) writes nothing."""

    @pytest.mark.asyncio
    async def test_appends_only_while_the_guard_is_unchanged(
        self, new_session: SessionFactory
    ) -> None:
        s: Any = await new_session()
        if not (supports(s, Capability.GUARDED_WRITE) and offers_sequencing(s)):
            pytest.skip("the session does not offer guarded writes")
        first = await s.append_if_newest(s, None, [_msg("a")])
        if first is None:
            assert await s.get_items() == [], "a declined append wrote"
            return
        assert await s.append_if_newest(s, None, [_msg("x")]) is None, "the guard changed"
        assert await s.append_if_newest(s, first[-1] + 1000, [_msg("x")]) is None
        assert texts(await s.get_items()) == ["a"]
        with pytest.raises(InvalidItemError):
            await s.append_if_newest(s, first[-1], [_msg("b"), "not an object"])
        more = await s.append_if_newest(s, first[-1], [_msg("b"), _msg("c")])
        assert more is not None and len(more) == 2 and first[-1] < more[0] < more[1]
        assert await s.get_sequenced_items() == list(
            zip(first + more, [_msg("a"), _msg("b"), _msg("c")], strict=True)
        )

    @pytest.mark.asyncio
    async def test_pops_only_while_the_guard_is_unchanged(
        self, new_session: SessionFactory
    ) -> None:
        s: Any = await new_session()
        if not (supports(s, Capability.GUARDED_WRITE) and offers_sequencing(s)):
            pytest.skip("the session does not offer guarded writes")
        seqs = await s.add_sequenced_items([_msg("a"), _msg("b")])
        assert await s.pop_if_newest(s, seqs[0]) == (False, None), "the guard changed"
        assert texts(await s.get_items()) == ["a", "b"]
        done, item = await s.pop_if_newest(s, seqs[-1])
        if done:
            assert item == _msg("b")
            assert texts(await s.get_items()) == ["a"]
        else:
            assert item is None and texts(await s.get_items()) == ["a", "b"]

    @pytest.mark.asyncio
    async def test_another_session_of_the_store_guards(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not (
            supports(s, Capability.GUARDED_WRITE) and supports(s, Capability.FAMILY)
            and offers_sequencing(s)
        ):
            pytest.skip("the session does not offer guarded writes and side stores")
        guard: Any = side_store(s, "guard")
        try:
            await guard.add_items([_msg("g")])
            (newest,) = [seq for seq, _ in await guard.get_sequenced_items(1)]
            written = await s.append_if_newest(guard, newest, [_msg("a")])
            assert texts(await s.get_items()) == ([] if written is None else ["a"])
            await guard.add_items([_msg("h")])
            assert await s.append_if_newest(guard, newest, [_msg("x")]) is None
            assert await s.pop_if_newest(guard, newest) == (False, None)
            assert texts(await s.get_items()) == ([] if written is None else ["a"])
        finally:
            await guard.clear_session()


class CheckedPopConformance(ConformanceBase):
    """``pop_checked(check)``: the newest item is removed and ``check(item)`` returned; when
    ``check`` raises, nothing is removed."""

    @pytest.mark.asyncio
    async def test_a_check_that_raises_removes_nothing(self, new_session: SessionFactory) -> None:
        s: Any = await new_session()
        if not supports(s, Capability.CHECKED_POP):
            pytest.skip("the session does not offer a checked pop")
        seen: list[Any] = []
        assert await s.pop_checked(seen.append) is None and seen == [], "empty: no check"
        await s.add_items([_msg("a"), _msg("b")])

        def refuse(item: Any) -> Any:
            raise LookupError(item_text(item))

        with pytest.raises(LookupError, match="b"):
            await s.pop_checked(refuse)
        assert texts(await s.get_items()) == ["a", "b"]
        assert await s.pop_checked(lambda item: item_text(item).upper()) == "B"
        assert texts(await s.get_items()) == ["a"]
        assert await s.pop_checked(item_text) == "a"
        assert await s.get_items() == []


class SDKCompactionConformance(ConformanceBase):
    """The SDK's ``OpenAIResponsesCompactionSession`` over the session, with a
    ``session_settings.limit`` shorter than the history: compaction replaces the whole history,
    a replacement that fails leaves the old one, and a session offering the SDK's atomic
    hooks replaces in one step: the whole history (``_atomic_replace_items``, never clear +
    add) and a suffix it was shown (``_get_compaction_snapshot``, refused once it changed)."""

    expects_atomic_replacement: ClassVar[bool | None] = None
    """True: fail when the SDK had to fall back to clear + add; None: either is accepted."""

    @pytest.mark.asyncio
    async def test_sdk_compaction_replaces_history_atomically(
        self, new_session: SessionFactory
    ) -> None:
        from agents.memory import OpenAIResponsesCompactionSession, SessionSettings

        s: Any = await new_session()
        history = [_msg("u0"), _msg("a0", "assistant"), _msg("u1"), _msg("a1", "assistant")]
        await s.add_items(history)
        if s.session_settings is None:
            s.session_settings = SessionSettings(limit=2)
        s.session_settings.limit = 2
        sequenced = offers_sequencing(s)
        numbering = s.get_sequenced_items if sequenced else None
        seqs = [seq for seq, _ in await numbering(100)] if numbering else []
        clears: list[None] = []
        clear = s.clear_session

        async def counted_clear() -> None:
            clears.append(None)
            await clear()

        s.clear_session = counted_clear
        stub = _StubCompactions()
        compaction = OpenAIResponsesCompactionSession(
            s.session_id, s, client=SimpleNamespace(responses=stub)  # type: ignore[arg-type]
        )
        stub.output = [{"type": "compaction", "encrypted_content": float("nan")}]  # unstorable
        with pytest.raises(ValueError):
            await compaction.run_compaction({"force": True})
        assert await s.get_items(100) == history, "a failed replacement lost data"
        unchanged = not numbering or seqs == [seq for seq, _ in await numbering(100)]
        stub.output = [_summary("s1")]
        await compaction.run_compaction({"force": True})
        assert await s.get_items(100) == [_summary("s1")], "compaction must replace everything"
        atomic = not clears
        if self.expects_atomic_replacement:
            assert atomic, "the SDK fell back to clear + add: the atomic hook is missing"
        if atomic:
            assert unchanged, "a failed atomic replacement changed the numbering"

        snapshot_of: Any = getattr(s, "_get_compaction_snapshot", _no_snapshot)  # the SDK's hook
        snapshot = await snapshot_of(2)
        if self.expects_atomic_replacement:
            assert snapshot is not None, "the SDK's suffix-replacement hook is missing"
        if snapshot is None:
            return
        await s.add_items([_msg("u2"), _msg("a2", "assistant"), _msg("u3")])
        snapshot = await snapshot_of(2)
        assert texts(snapshot.items) == ["a2", "u3"] and not snapshot.complete
        await s.add_items([_msg("late")])
        assert not await snapshot.replace_suffix(1, [_summary("stale")])
        snapshot = await snapshot_of(3)
        assert await snapshot.replace_suffix(1, [_summary("s2")])
        assert await s.get_items(100) == [
            _summary("s1"), _msg("u2"), _msg("a2", "assistant"), _summary("s2")
        ]


async def _no_snapshot(limit: int) -> None:
    return None
