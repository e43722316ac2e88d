"""The session family tiers (layer contract v2).

``FamilyConformance``: side stores never take the user's settings, key rotation rewrites every
member in place (so compaction views and branches survive it and the old key can be dropped), an
interrupted rotation followed by a clear resurrects nothing, and a sliding TTL keeps (and ends)
the whole family together; it stacks this package's layers over the session under test and needs
the ``encryption`` extra. ``FamilyBatchConformance``: family reads and writes match the sessions'
own calls. Both skip sessions that do not declare the capabilities.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from agents.memory import Session, SessionSettings

from ..core.capabilities import Capability
from ..core.codec import encode_batch
from ..core.family import close_quietly, side_store
from ..errors import InvalidItemError
from ..wrappers.foreign import expiring_layer
from .base import ConformanceBase, msg
from .helpers import cancel_after, texts

_OLD_KEY = "an old passphrase for the family conformance tier, long and random enough"
_NEW_KEY = "a new passphrase for the family conformance tier, long and random enough too"


@dataclass
class _Clock:
    """A clock the test moves by hand."""

    now: float = 1_764_700_000.0

    def __call__(self) -> float:
        return self.now


class FamilyConformance(ConformanceBase):
    """The session family: side stores, settings, and key rotation over every member."""

    async def test_side_stores_never_take_the_users_settings(self) -> None:
        from ..wrappers.compaction import CompactionSession

        # compaction keeps numbers of s
        s = await self.new_session(Capability.FAMILY, Capability.SEQUENCED)
        s.session_settings = SessionSettings(limit=2)
        side = side_store(s, "records")
        await side.add_items([msg(str(i)) for i in range(4)])
        assert texts(await side.get_items()) == ["0", "1", "2", "3"]
        compacting = CompactionSession(s, keep_last=1)
        for turn in range(4):
            await compacting.add_items([msg(f"q{turn}"), msg(f"a{turn}", "assistant")])
            assert await compacting.compact(force=True) is not None
        # The user's limit=2 must not cut the records short (prune_archive relies on them).
        assert len(await compacting.get_compaction_records()) == 4
        await side.clear_session()

    async def test_rotation_keeps_a_compacted_view_and_its_records(self) -> None:
        from ..wrappers.compaction import CompactionSession
        from ..wrappers.encrypted import EncryptedSession

        s = await self.new_session(Capability.FAMILY, Capability.REWRITE, Capability.SEQUENCED)
        old = CompactionSession(EncryptedSession(s, keys={"k1": _OLD_KEY}), keep_last=2)
        await old.add_items([msg(f"m{i}") for i in range(6)])
        assert await old.compact(force=True) is not None
        view = await old.get_items()
        async with self._rotated(s.session_id) as fresh:
            after = CompactionSession(fresh, keep_last=2)
            assert await after.get_items() == view, "the view is the summary plus the tail"
            assert len(await after.get_compaction_records()) == 1
            await after.clear_session()

    async def test_rotation_keeps_branches_and_their_parents_turns(self) -> None:
        from ..wrappers.advanced import AdvancedSession
        from ..wrappers.encrypted import EncryptedSession

        s = await self.new_session(Capability.FAMILY, Capability.REWRITE, Capability.SEQUENCED)
        old = AdvancedSession(EncryptedSession(s, keys={"k1": _OLD_KEY}))
        await old.add_items([msg("q1"), msg("a1", "assistant"), msg("q2"), msg("a2", "assistant")])
        await old.create_branch_from_turn(2, "alt")
        await old.add_items([msg("q2 alt"), msg("a2 alt", "assistant")])
        expected = ["q1", "a1", "q2 alt", "a2 alt"]
        assert texts(await old.get_items()) == expected
        async with self._rotated(s.session_id) as fresh:
            after = AdvancedSession(fresh)
            names = {b["branch_id"] for b in await after.list_branches()}
            assert names == {"main", "alt"}, "branches survive dropping the old key"
            assert texts(await after.get_items(branch_id="alt")) == expected
            assert texts(await after.get_items(branch_id="main")) == ["q1", "a1", "q2", "a2"]
            await after.clear_session()

    async def test_an_interrupted_rotation_then_a_clear_resurrects_nothing(self) -> None:
        from ..wrappers.encrypted import EncryptedSession

        s = await self.new_session(Capability.FAMILY, Capability.REWRITE, Capability.SEQUENCED)
        writer = EncryptedSession(s, keys={"k1": _OLD_KEY})
        ring = EncryptedSession(s, keys={"k2": _NEW_KEY, "k1": _OLD_KEY}, active="k2")
        for steps in range(0, 12, 2):
            await writer.add_items([msg(f"old {steps}.{i}") for i in range(3)])
            await cancel_after(ring.rotate(), steps)
            await ring.clear_session()
            await ring.rotate()
            assert await ring.get_items() == [], f"cancelled after {steps} steps"
            assert await s.count_items() == 0, "nothing may come back from a backup"

    async def test_a_sliding_ttl_keeps_the_whole_family_alive(self) -> None:
        from ..wrappers.advanced import AdvancedSession
        from ..wrappers.compaction import CompactionSession
        from ..wrappers.ttl import TTLSession

        s = await self.new_session(Capability.FAMILY, Capability.SEQUENCED)
        if expiring_layer(s) is not None:
            pytest.skip("the session expires items itself; this test stacks its own TTL layer")
        clock = _Clock()

        def stack(inner: Session) -> AdvancedSession:
            return AdvancedSession(TTLSession(inner, ttl=2, sliding=True, clock=clock))

        branching = stack(s)
        await branching.add_items(
            [msg("q1"), msg("a1", "assistant"), msg("q2"), msg("a2", "assistant")]
        )
        await branching.create_branch_from_turn(2, "alt")
        own = []
        for step in range(7):  # a write to the branch every 0.5 s for 3.5 s
            clock.now += 0.5
            own.append(f"b{step}")
            await branching.add_items([msg(own[-1])])
        assert texts(await branching.get_items()) == ["q1", "a1", *own], "parent turns kept"
        fresh = await self.create_session(s.session_id)
        try:
            again = stack(fresh)
            assert {b["branch_id"] for b in await again.list_branches()} == {"main", "alt"}
            assert texts(await again.get_items()) == ["q1", "a1", *own]
            clock.now += 2.5  # no write anywhere for longer than ttl: the family is dead
            assert await again.get_items() == []
            assert [b["branch_id"] for b in await again.list_branches()] == ["main"]
        finally:
            await close_quietly(fresh)

        other = await self.new_session(suffix="compacted")
        compacting = CompactionSession(
            TTLSession(other, ttl=2, sliding=True, clock=clock), keep_last=2
        )
        await compacting.add_items([msg(f"m{i}") for i in range(6)])
        assert await compacting.compact(force=True) is not None
        view = await compacting.get_items()
        for step in range(7):
            clock.now += 0.5
            await compacting.add_items([msg(f"n{step}")])
        now_view = await compacting.get_items()
        assert now_view[: len(view)] == view, "the summary stays; the originals stay archived"
        assert texts(now_view[len(view) :]) == [f"n{i}" for i in range(7)]

    @contextlib.asynccontextmanager
    async def _rotated(self, session_id: str) -> AsyncIterator[Session]:
        """Rotate ``session_id``'s family to the new key, then yield a new object on it that
        knows only the new key (strict: an item left under the old key raises)."""
        from ..wrappers.encrypted import EncryptedSession

        other = await self.create_session(session_id)
        try:
            ring = EncryptedSession(other, keys={"k2": _NEW_KEY, "k1": _OLD_KEY}, active="k2")
            assert await ring.rotate() > 0
            assert await ring.rotate() == 0, "a second rotation finds nothing left to do"
        finally:
            await close_quietly(other)
        fresh = await self.create_session(session_id)
        try:
            yield EncryptedSession(fresh, keys={"k2": _NEW_KEY}, strict=True)
        finally:
            await close_quietly(fresh)

    async def test_closing_an_object_leaves_its_sessions_side_stores_working(self) -> None:
        # A store may share side stores among the objects of one session.
        s = await self.new_session(Capability.FAMILY)
        other = await self.create_session(s.session_id)
        await side_store(other, "records").add_items([msg("a")])
        mine = side_store(s, "records")
        await close_quietly(other)
        await mine.add_items([msg("b")])
        assert texts(await side_store(s, "records").get_items()) == ["a", "b"]
        await mine.clear_session()


class FamilyBatchConformance(ConformanceBase):
    """``get_sequenced_family``/``add_sequenced_family``: several sessions' reads or appends
    at once, each as its own call would do it; a family write is all-or-nothing, and a session
    from another store among them is served by its own methods."""

    async def test_family_reads_match_reads_one_by_one(self) -> None:
        s = await self.new_session(Capability.FAMILY, Capability.SEQUENCED, Capability.FAMILY_BATCH)
        side: Any = side_store(s, "records")
        seqs = await s.add_sequenced_items([msg(str(i)) for i in range(5)])
        side_seqs = await side.add_sequenced_items([msg("x"), msg("y")])
        reads = [
            (side, None, side_seqs[0] - 1, None),
            (s, 2, None, None),
            (s, 0, None, None),
            (s, None, seqs[0], seqs[4]),
            (side, 1, None, side_seqs[1]),
        ]
        one_by_one = [
            await m.get_sequenced_items(limit, after=after, before=before)
            for m, limit, after, before in reads
        ]
        assert await s.get_sequenced_family(reads) == one_by_one
        assert [texts(i for _, i in rows) for rows in one_by_one] == [
            ["x", "y"],
            ["3", "4"],
            [],
            ["1", "2", "3"],
            ["x"],
        ]
        await side.clear_session()

    async def test_family_writes_match_writes_one_by_one(self) -> None:
        s = await self.new_session(Capability.FAMILY, Capability.SEQUENCED, Capability.FAMILY_BATCH)
        side: Any = side_store(s, "records")
        numbers = await s.add_sequenced_family(
            [(side, [msg("x"), msg("y")]), (s, [msg("a")]), (s, []), (side, [msg("z")])]
        )
        assert [len(n) for n in numbers] == [2, 1, 0, 1]
        assert await side.get_sequenced_items() == list(
            zip(numbers[0] + numbers[3], [msg("x"), msg("y"), msg("z")], strict=True)
        )
        assert await s.get_sequenced_items() == [(numbers[1][0], msg("a"))]
        assert "records" in await s.family_purposes(), "a side store is listed before it is written"
        bad: list[Any] = [msg("b"), "not an object"]
        with pytest.raises(InvalidItemError) as caught:
            await s.add_sequenced_family([(side, [msg("w")]), (s, bad)])
        assert caught.value.index == 1
        assert texts(await side.get_items()) == ["x", "y", "z"], "a bad batch writes nothing"
        assert texts(await s.get_items()) == ["a"]
        for steps in range(8):  # cancelled anywhere: both batches are stored or neither
            await cancel_after(
                s.add_sequenced_family([(side, [msg(f"r{steps}")]), (s, [msg(f"c{steps}")])]), steps
            )
            stored = (
                f"r{steps}" in texts(await side.get_items()),
                f"c{steps}" in texts(await s.get_items()),
            )
            assert stored in ((True, True), (False, False)), f"half a family write at {steps}"
        await side.clear_session()

    async def test_a_session_of_another_store_is_served_by_its_own_methods(self) -> None:
        from ..backends.memory import InMemorySession, InMemoryStore

        s = await self.new_session(Capability.SEQUENCED, Capability.FAMILY_BATCH)
        other = InMemorySession(s.session_id, store=InMemoryStore())
        numbers = await s.add_sequenced_family([(other, [msg("o")]), (s, [msg("a")])])
        assert texts(await other.get_items()) == ["o"] and texts(await s.get_items()) == ["a"]
        assert await s.get_sequenced_family([(s, None, None, None), (other, 1, None, None)]) == [
            [(numbers[1][0], msg("a"))],
            [(numbers[0][0], msg("o"))],
        ]
        encoded = await s.add_encoded_family(
            [(other, encode_batch([msg("o2")])), (s, encode_batch([msg("a2"), msg("a3")]))]
        )
        assert [len(n) for n in encoded] == [1, 2]
        assert texts(await other.get_items()) == ["o", "o2"]
        assert texts(await s.get_items()) == ["a", "a2", "a3"], "encoded batches store the same"
