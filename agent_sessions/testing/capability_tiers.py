"""Capability tiers: one class per optional capability, each skipping sessions without it.

Sequence numbers, range deletion, rewrite in place, writes at given numbers, guarded writes,
commits, the checked pop, and the SDK's compaction session over the session; the family tiers
live in ``family_tiers``.
"""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from ..core.capabilities import Capability, supports
from ..core.catalog import CatalogQuery, SupportsCatalog
from ..core.commit import Append, Pop, commit
from ..core.family import close_quietly, side_store
from ..errors import CommitConflictError, InvalidItemError, SequenceConflictError
from .base import ConformanceBase, msg
from .helpers import item_text, texts


class SequencingConformance(ConformanceBase):
    """Sequence numbers: increasing in commit order, never reused, ranged reads and counts."""

    async def test_sequence_numbers_when_offered(self) -> None:
        s = await self.new_session(Capability.SEQUENCED)
        first = await s.add_sequenced_items([msg("a"), msg("b")])
        second = await s.add_sequenced_items([msg("c")])
        assert len(first) == 2 and len(second) == 1
        assert first[0] < first[1] < second[0]
        popped = await s.pop_item()
        assert item_text(popped) == "c"
        third = await s.add_sequenced_items([msg("d")])
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

    async def test_numbers_keep_rising_across_a_clear(self) -> None:
        # Layers keep numbers (a TTL boundary, branch points): a number reused after a clear
        # would make them take the new item for the old one.
        s = await self.new_session(Capability.SEQUENCED, suffix="cleared")
        first = await s.add_sequenced_items([msg("a"), msg("b")])
        await s.clear_session()
        again = await s.add_sequenced_items([msg("c")])
        assert again[0] > first[-1], "a number was reused after clear_session"
        assert [seq for seq, _ in await s.get_sequenced_items()] == again

    async def test_two_objects_share_one_numbering(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, suffix="numbered")
        other: Any = await self.create_session(s.session_id)
        try:
            seqs = await s.add_sequenced_items([msg("a"), msg("b")])
            assert [seq for seq, _ in await other.get_sequenced_items()] == seqs
            assert item_text(await other.pop_item()) == "b"
            later = await s.add_sequenced_items([msg("c")])
            assert later[0] > seqs[1], "a number popped through another object was reused"
            pairs = await other.get_sequenced_items()
            assert [(seq, item_text(item)) for seq, item in pairs] == [
                (seqs[0], "a"),
                (later[0], "c"),
            ]
        finally:
            await close_quietly(other)


class RangeDeleteConformance(ConformanceBase):
    """``delete_items(before=seq)``: atomic, exact, numbers never restart after a clear."""

    async def test_range_delete_when_offered(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.RANGE_DELETE)
        seqs = await s.add_sequenced_items([msg(str(i)) for i in range(6)])
        assert await s.delete_items(before=seqs[0]) == 0
        assert await s.delete_items(before=seqs[3]) == 3
        assert texts(await s.get_items()) == ["3", "4", "5"]
        assert await s.delete_items(before=seqs[3]) == 0
        other = await self.new_session()
        await other.add_items([msg("untouched")])
        await s.clear_session()
        after_clear = await s.add_sequenced_items([msg("new")])
        assert after_clear[0] > seqs[-1], "numbers must not restart after clear_session"
        assert await s.delete_items(before=seqs[-1] + 1) == 0  # a stale purge spares new items
        assert texts(await s.get_items()) == ["new"]
        assert texts(await other.get_items()) == ["untouched"]

    async def test_range_delete_rejects_a_bound_that_is_not_an_int(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.RANGE_DELETE)
        seqs = await s.add_sequenced_items([msg(str(i)) for i in range(3)])
        for bad in (None, "zzz", str(seqs[-1] + 1), float(seqs[1]) + 0.5, True):
            with pytest.raises(TypeError, match="before"):
                await s.delete_items(before=bad)
        assert texts(await s.get_items()) == ["0", "1", "2"], "a bad bound must delete nothing"


class RewriteConformance(ConformanceBase):
    """Rewrite in place: numbers never change, missing numbers are skipped, bad input writes
    nothing."""

    async def test_rewrite_keeps_every_sequence_number(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.REWRITE)
        seqs = await s.add_sequenced_items([msg("a"), msg("b"), msg("c")])
        assert await s.rewrite_items([(seqs[1], msg("B")), (seqs[2], msg("C"))]) == 2
        rows = await s.get_sequenced_items()
        assert [seq for seq, _ in rows] == seqs
        assert texts(item for _, item in rows) == ["a", "B", "C"]
        await s.pop_item()
        assert await s.rewrite_items([(seqs[2], msg("gone"))]) == 0, "a popped number is skipped"
        later = await s.add_sequenced_items([msg("d")])
        assert later[0] > seqs[2], "a rewrite must not disturb the numbering"
        assert texts(await s.get_items()) == ["a", "B", "d"]

    async def test_a_bad_rewrite_writes_nothing(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.REWRITE)
        seqs = await s.add_sequenced_items([msg("a"), msg("b")])
        with pytest.raises(InvalidItemError) as caught:
            await s.rewrite_items([(seqs[0], msg("A")), (seqs[1], "not an object")])
        assert caught.value.index == 1
        with pytest.raises(ValueError, match="twice"):
            await s.rewrite_items([(seqs[0], msg("A")), (seqs[0], msg("A2"))])
        with pytest.raises(TypeError):
            await s.rewrite_items([("1", msg("A"))])
        assert texts(await s.get_items()) == ["a", "b"]


class SequencedWriteConformance(ConformanceBase):
    """``write_sequenced_items``: an empty session filled at given numbers and times, in one
    step; later appends number above them; a session holding items is refused."""

    async def test_writes_at_given_numbers_and_times(self) -> None:
        s = await self.new_session(Capability.SEQUENCED_WRITE)
        base = _numbers_base()
        seqs = [base + 3, base + 4, base + 7, base + 20]
        created = datetime(2020, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
        updated = datetime(2021, 6, 7, 8, 9, 10, tzinfo=timezone.utc)
        await s.write_sequenced_items(
            [(seq, msg(str(i))) for i, seq in enumerate(seqs)],
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
        later = await s.add_sequenced_items([msg("new")])
        assert later[0] > seqs[-1], "an append reused a number written at"

    async def test_refuses_a_session_holding_items(self) -> None:
        s = await self.new_session(Capability.SEQUENCED_WRITE)
        base = _numbers_base()
        await s.add_items([msg("kept")])
        with pytest.raises(SequenceConflictError, match="already holds 1 item"):
            await s.write_sequenced_items([(base, msg("x"))])
        assert texts(await s.get_items()) == ["kept"]
        await s.clear_session()
        await s.write_sequenced_items([(base, msg("x"))])  # empty again: accepted
        assert [seq for seq, _ in await s.get_sequenced_items()] == [base]

    async def test_bad_input_writes_nothing(self) -> None:
        s = await self.new_session(Capability.SEQUENCED_WRITE)
        base = _numbers_base()
        with pytest.raises(InvalidItemError, match="item 1 "):
            await s.write_sequenced_items([(base, msg("a")), (base + 1, {"x": float("nan")})])
        for bad in ([(base + 1, msg("a")), (base, msg("b"))], [(0, msg("a"))]):
            with pytest.raises(ValueError, match="nothing was written"):
                await s.write_sequenced_items(bad)
        with pytest.raises(TypeError):
            await s.write_sequenced_items([("1", msg("a"))])
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

    async def test_appends_only_while_the_guard_is_unchanged(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.GUARDED_WRITE)
        first = await s.append_if_newest(s, None, [msg("a")])
        if first is None:
            assert await s.get_items() == [], "a declined append wrote"
            return
        assert await s.append_if_newest(s, None, [msg("x")]) is None, "the guard changed"
        assert await s.append_if_newest(s, first[-1] + 1000, [msg("x")]) is None
        assert texts(await s.get_items()) == ["a"]
        with pytest.raises(InvalidItemError):
            await s.append_if_newest(s, first[-1], [msg("b"), "not an object"])
        more = await s.append_if_newest(s, first[-1], [msg("b"), msg("c")])
        assert more is not None and len(more) == 2 and first[-1] < more[0] < more[1]
        assert await s.get_sequenced_items() == list(
            zip(first + more, [msg("a"), msg("b"), msg("c")], strict=True)
        )

    async def test_pops_only_while_the_guard_is_unchanged(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.GUARDED_WRITE)
        seqs = await s.add_sequenced_items([msg("a"), msg("b")])
        assert await s.pop_if_newest(s, seqs[0]) == (False, None), "the guard changed"
        assert texts(await s.get_items()) == ["a", "b"]
        done, item = await s.pop_if_newest(s, seqs[-1])
        if done:
            assert item == msg("b")
            assert texts(await s.get_items()) == ["a"]
        else:
            assert item is None and texts(await s.get_items()) == ["a", "b"]

    async def test_guarded_writes_race_plain_appends_to_the_guard(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.GUARDED_WRITE)
        rivals: dict[int, Any] = {}  # what the plain appends wrote, by number

        async def newest() -> int | None:
            last = await s.get_sequenced_items(1)
            return last[-1][0] if last else None

        async def rival() -> None:
            for k in range(6):
                (seq,) = await s.add_sequenced_items([msg(f"r{k}")])
                rivals[seq] = msg(f"r{k}")

        appended: list[tuple[int | None, int]] = []

        async def appender(task: int) -> None:
            for k in range(6):
                seq = await newest()
                written = await s.append_if_newest(s, seq, [msg(f"{task}:{k}")])
                if written is not None:
                    appended.append((seq, written[0]))

        await asyncio.gather(*(rival() for _ in range(4)), *(appender(t) for t in range(6)))
        items = dict(await s.get_sequenced_items())
        assert len(items) == 24 + len(appended), "an append was lost"
        for seq, first in appended:
            between = [n for n in items if (seq or 0) < n < first]
            assert not between, f"appended under {seq} though {between} came after it"
        popped: list[tuple[int | None, Any]] = []

        async def popper() -> None:
            for _ in range(6):
                seq = await newest()
                done, item = await s.pop_if_newest(s, seq)
                if done:
                    popped.append((seq, item))

        await asyncio.gather(*(rival() for _ in range(4)), *(popper() for _ in range(6)))
        for seq, item in popped:
            assert seq is not None and item == {**items, **rivals}[seq], "popped a newer item"
        left = [n for n, _ in await s.get_sequenced_items()]
        assert sorted(left + [seq for seq, _ in popped]) == sorted({*items, *rivals})

    async def test_another_session_of_the_store_guards(self) -> None:
        needs = Capability.SEQUENCED, Capability.GUARDED_WRITE, Capability.FAMILY
        s = await self.new_session(*needs)
        guard: Any = side_store(s, "guard")
        try:
            await guard.add_items([msg("g")])
            (newest,) = [seq for seq, _ in await guard.get_sequenced_items(1)]
            written = await s.append_if_newest(guard, newest, [msg("a")])
            assert texts(await s.get_items()) == ([] if written is None else ["a"])
            await guard.add_items([msg("h")])
            assert await s.append_if_newest(guard, newest, [msg("x")]) is None
            assert await s.pop_if_newest(guard, newest) == (False, None)
            assert texts(await s.get_items()) == ([] if written is None else ["a"])
        finally:
            await guard.clear_session()

    async def test_pops_only_while_its_own_newest_is_the_one_given(self) -> None:
        needs = Capability.SEQUENCED, Capability.GUARDED_WRITE, Capability.FAMILY
        s = await self.new_session(*needs)
        guard: Any = side_store(s, "guard")
        try:
            seqs = await s.add_sequenced_items([msg("a"), msg("b")])
            assert await s.pop_if_newest(guard, None, newest=seqs[0]) == (False, None)
            assert texts(await s.get_items()) == ["a", "b"], "popped though its newest changed"
            done, item = await s.pop_if_newest(guard, None, newest=seqs[1])
            if done:
                assert item == msg("b") and texts(await s.get_items()) == ["a"]
            else:
                assert item is None and texts(await s.get_items()) == ["a", "b"]
        finally:
            await guard.clear_session()


class CommitConformance(ConformanceBase):
    """``commit(ops, expect)``: the ops run in order in one step, only while every expected
    newest number holds; a refused commit (CommitConflictError) writes nothing."""

    async def test_one_commit_writes_several_sessions(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.COMMIT, Capability.FAMILY)
        side: Any = side_store(s, "commit")
        try:
            (first,) = await s.add_sequenced_items([msg("a")])
            numbers, popped, more = await commit(
                [Append(side, [msg("x"), msg("y")]), Pop(s), Append(s, [msg("b")])],
                [(s, first), (side, None)],
            )
            assert item_text(popped) == "a"
            assert [seq for seq, _ in await side.get_sequenced_items()] == numbers
            assert await s.get_sequenced_items() == [(more[0], msg("b"))]
            assert more[0] > first
            assert await commit([Pop(side)], [(side, numbers[-1])]) == [msg("y")]
        finally:
            await side.clear_session()

    async def test_a_refused_commit_writes_nothing(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.COMMIT, Capability.FAMILY)
        side: Any = side_store(s, "commit")
        try:
            seqs = await s.add_sequenced_items([msg("a"), msg("b")])
            for expect in ([(s, seqs[0])], [(s, None)], [(s, seqs[1]), (side, seqs[1])]):
                with pytest.raises(CommitConflictError):
                    await commit([Append(side, [msg("x")]), Pop(s)], expect)
                with pytest.raises(CommitConflictError):
                    await commit([Pop(s)], expect)
            with pytest.raises(InvalidItemError):
                await commit([Append(s, [msg("x"), "not an object"])], [(s, seqs[1])])
            assert texts(await s.get_items()) == ["a", "b"]
            assert await side.get_items() == []
        finally:
            await side.clear_session()

    async def test_guarded_commits_race_as_compare_and_set(self) -> None:
        s = await self.new_session(Capability.SEQUENCED, Capability.COMMIT, suffix="cas")
        taken: list[tuple[int | None, int]] = []  # (expected newest, first number written)

        async def rival() -> None:
            for k in range(6):
                await s.add_items([msg(f"r{k}")])

        async def guarded(task: int) -> None:
            for k in range(6):
                last = await s.get_sequenced_items(1)
                seq = last[-1][0] if last else None
                try:
                    (numbers,) = await commit([Append(s, [msg(f"{task}:{k}")])], [(s, seq)])
                except CommitConflictError:
                    continue
                taken.append((seq, numbers[0]))

        await asyncio.gather(*(rival() for _ in range(3)), *(guarded(t) for t in range(4)))
        numbers = [seq for seq, _ in await s.get_sequenced_items()]
        assert len(numbers) == 18 + len(taken), "a commit or an append was lost"
        for seq, first in taken:
            between = [n for n in numbers if (seq or 0) < n < first]
            assert not between, f"committed under {seq} though {between} came after it"


class CheckedPopConformance(ConformanceBase):
    """``pop_checked(check)``: the newest item is removed and ``check(item)`` returned; when
    ``check`` raises, nothing is removed."""

    async def test_a_check_that_raises_removes_nothing(self) -> None:
        s = await self.new_session(Capability.CHECKED_POP)
        seen: list[Any] = []
        assert await s.pop_checked(seen.append) is None and seen == [], "empty: no check"
        await s.add_items([msg("a"), msg("b")])

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

    async def test_sdk_compaction_replaces_history_atomically(self) -> None:
        from agents.memory import OpenAIResponsesCompactionSession, SessionSettings

        s = await self.new_session()
        history = [msg("u0"), msg("a0", "assistant"), msg("u1"), msg("a1", "assistant")]
        await s.add_items(history)
        if s.session_settings is None:
            s.session_settings = SessionSettings(limit=2)
        s.session_settings.limit = 2
        numbering = s.get_sequenced_items if supports(s, Capability.SEQUENCED) else None
        seqs = [seq for seq, _ in await numbering(100)] if numbering else []
        clears: list[None] = []
        clear = s.clear_session

        async def counted_clear() -> None:
            clears.append(None)
            await clear()

        s.clear_session = counted_clear
        stub = _StubCompactions()
        compaction = OpenAIResponsesCompactionSession(
            s.session_id,
            s,
            client=SimpleNamespace(responses=stub),  # type: ignore[arg-type]
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
        await s.add_items([msg("u2"), msg("a2", "assistant"), msg("u3")])
        snapshot = await snapshot_of(2)
        assert texts(snapshot.items) == ["a2", "u3"] and not snapshot.complete
        await s.add_items([msg("late")])
        assert not await snapshot.replace_suffix(1, [_summary("stale")])
        snapshot = await snapshot_of(3)
        assert await snapshot.replace_suffix(1, [_summary("s2")])
        assert await s.get_items(100) == [
            _summary("s1"),
            msg("u2"),
            msg("a2", "assistant"),
            _summary("s2"),
        ]


async def _no_snapshot(limit: int) -> None:
    return None
