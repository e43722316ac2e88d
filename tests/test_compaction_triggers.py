"""CompactionSession's triggers (their context, SDK-style callbacks, what a check reads, other
writers during a turn) and the token estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents.items import TResponseInputItem
from agents.memory.openai_responses_compaction_session import default_should_trigger_compaction

from agent_sessions import InMemorySession, InMemoryStore, SQLiteSession
from agent_sessions.wrappers.compaction import (
    CompactionSession,
    CompactionTriggerContext,
    TokenEstimator,
    token_threshold_trigger,
)
from agent_sessions.wrappers.ttl import TTLSession
from tests._compaction_fixtures import msg, new_session, sid
from tests.wrapper_stacks import FakeClock


@pytest.mark.asyncio
async def test_trigger_context_and_sdk_style_callbacks() -> None:
    seen: list[CompactionTriggerContext] = []

    async def trigger(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return default_should_trigger_compaction(dict(context))  # the SDK's own default works

    session = new_session(should_trigger_compaction=trigger, keep_last=2)
    await session.add_items([msg(f"q{i}") for i in range(5)])
    await session.run_compaction({"response_id": "resp-1"})
    assert await session.get_compaction_records() == []  # only user messages: 0 candidates
    await session.add_items([msg(f"a{i}", "assistant") for i in range(10)])
    await session.run_compaction({"response_id": "resp-2"})
    assert len(await session.get_compaction_records()) == 1
    first, second = seen
    assert first["response_id"] == "resp-1" and first["item_count"] == 5
    assert first["items_since_last_compaction"] == 5 and first["archived_item_count"] == 0
    assert (first["estimated_tokens"] > 0 and first["token_estimate_method"] == "offline") or (
        first["token_estimate_method"].startswith("tiktoken:")
    )
    assert len(second["compaction_candidate_items"]) == 10


class _CountingReads(InMemorySession):
    """Records how many items each sequenced read returned."""

    read_sizes: list[int]

    async def get_sequenced_items(
        self, limit: int | None = None, *, after: int | None = None, before: int | None = None
    ) -> list[tuple[int, TResponseInputItem]]:
        pairs = await super().get_sequenced_items(limit, after=after, before=before)
        self.read_sizes.append(len(pairs))
        return pairs


@pytest.mark.asyncio
async def test_an_idle_trigger_check_reads_only_the_items_written_since_the_last() -> None:
    inner = _CountingReads(sid())
    inner.read_sizes = []
    seen: list[CompactionTriggerContext] = []

    def never(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return False

    session = CompactionSession(
        inner, should_trigger_compaction=never, token_estimator=TokenEstimator(encoding=None)
    )
    await session.add_items([msg(f"q{i}") for i in range(300)])
    await session.run_compaction()
    # Written past the wrapper (as another object would): the check must read them.
    await inner.add_items([msg("new question"), msg("new answer", "assistant")])
    inner.read_sizes.clear()
    await session.run_compaction()
    assert inner.read_sizes == [3]  # the newest known item and the two new ones
    assert seen[-1]["session_items"] == await inner.get_items()
    assert seen[-1]["estimated_tokens"] == sum(
        await TokenEstimator(encoding=None).count_items(await inner.get_items())
    )
    assert seen[-1]["compaction_candidate_items"] == [msg("new answer", "assistant")]


@pytest.mark.asyncio
async def test_the_trigger_sees_pops_clears_and_writes_made_by_another_object() -> None:
    store = InMemoryStore()
    session_id = sid()
    seen: list[CompactionTriggerContext] = []

    def never(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return False

    estimator = TokenEstimator(encoding=None)
    watcher = CompactionSession(
        InMemorySession(session_id, store=store),
        should_trigger_compaction=never,
        token_estimator=estimator,
    )
    other = CompactionSession(
        InMemorySession(session_id, store=store), should_trigger_compaction=never, keep_last=1
    )
    steps: list[tuple[str, int]] = [
        ("add", 5), ("pop", 1), ("add", 2), ("pop", 3), ("add", 1), ("clear", 0), ("add", 4),
        ("pop", 4), ("add", 3), ("compact", 0), ("add", 2), ("pop", 1), ("add", 1),
    ]  # fmt: skip
    counter = 0
    for op, n in steps:
        if op == "add":
            await other.add_items([msg(f"m{counter + k}", "assistant") for k in range(n)])
            counter += n
        elif op == "pop":
            for _ in range(n):
                await other.pop_item()
        elif op == "clear":
            await other.clear_session()
        else:
            assert await other.compact() is not None
        await watcher.run_compaction()
        expected = await other.get_items()
        assert seen[-1]["session_items"] == expected, (op, n)
        assert seen[-1]["item_count"] == len(expected)
        assert seen[-1]["estimated_tokens"] == sum(await estimator.count_items(expected))


@pytest.mark.asyncio
async def test_the_trigger_sees_items_that_expired_since_the_last_check() -> None:
    # Expiry removes items without a pop: the check cannot extend what it knew, it reads.
    clock = FakeClock()
    seen: list[CompactionTriggerContext] = []

    def never(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return False

    session = CompactionSession(
        TTLSession(InMemorySession(sid(), store=InMemoryStore()), item_ttl=30, clock=clock),
        should_trigger_compaction=never,
    )
    await session.add_items([msg("old question")])
    clock.advance(20)
    await session.add_items([msg("answer", "assistant")])
    await session.run_compaction()
    assert seen[-1]["item_count"] == 2
    clock.advance(11)  # the question is 31 s old, the answer (the newest known) 11 s
    await session.add_items([msg("new question")])
    await session.run_compaction()
    assert seen[-1]["session_items"] == [msg("answer", "assistant"), msg("new question")]
    assert seen[-1]["item_count"] == 2


async def _runner_turn(session: CompactionSession, n: int, between: Any = None) -> None:
    """What the Runner does in a turn: read the view, write input and output, call the hook;
    ``between(step)`` runs at each point where another writer could come in."""

    async def at(step: str) -> None:
        if between is not None:
            await between(step)

    await session.get_items(limit=20)
    await at("after read")
    await session.add_items([msg(f"q{n}")])
    await at("between writes")
    await session.add_items([msg(f"a{n}", "assistant")])
    await session.run_compaction()
    await at("after hook")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.asyncio
async def test_a_turn_whose_writes_were_all_this_objects_checks_without_reading(
    kind: str, tmp_path: Path
) -> None:
    inner: Any = (
        _CountingReads(sid()) if kind == "memory" else SQLiteSession(sid(), tmp_path / "c.db")
    )
    reads: list[Any] = []
    real = inner.get_sequenced_items

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append((args, kwargs))
        return await real(*args, **kwargs)

    inner.get_sequenced_items = counted
    inner.read_sizes = []
    seen: list[CompactionTriggerContext] = []

    def never(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return False

    estimator = TokenEstimator(encoding=None)
    session = CompactionSession(inner, should_trigger_compaction=never, token_estimator=estimator)
    await session.add_items([msg(f"m{i}") for i in range(50)])
    await _runner_turn(session, 0)  # the first check reads the view
    for n in range(1, 4):
        reads.clear()
        await _runner_turn(session, n)
        assert reads == []  # the view read is one family read; the check reads nothing
        expected = await inner.get_items()
        assert seen[-1]["session_items"] == expected
        assert seen[-1]["estimated_tokens"] == sum(await estimator.count_items(expected))
        assert seen[-1]["compaction_candidate_items"][-1] == msg(f"a{n}", "assistant")
    reads.clear()
    await session.add_items([msg("solo", "assistant")])
    await session.run_compaction()  # without the turn's get_items: the record alone is read
    assert reads == []
    assert seen[-1]["session_items"] == await inner.get_items()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("step", ["after read", "between writes", "after hook"])
@pytest.mark.parametrize("change", ["add", "pop"])
@pytest.mark.asyncio
async def test_another_writer_during_a_turn_is_seen_and_compaction_still_comes_when_due(
    kind: str, step: str, change: str, tmp_path: Path
) -> None:
    session_id, path, store = sid(), tmp_path / "c.db", InMemoryStore()

    def open_inner() -> Any:
        if kind == "memory":
            return InMemorySession(session_id, store=store)
        return SQLiteSession(session_id, path)

    seen: list[CompactionTriggerContext] = []

    def watching(context: CompactionTriggerContext) -> bool:
        seen.append(context)
        return context["items_since_last_compaction"] >= 30

    estimator = TokenEstimator(encoding=None)
    watcher = CompactionSession(
        open_inner(), should_trigger_compaction=watching, token_estimator=estimator, keep_last=2
    )
    other = open_inner()
    await watcher.add_items([msg(f"m{i}") for i in range(10)])
    await _runner_turn(watcher, 0)
    counter = 0

    async def interfere(at: str) -> None:
        nonlocal counter
        if at != step:
            return
        if change == "add":
            await other.add_items([msg(f"other{counter + k}", "assistant") for k in range(3)])
            counter += 3
        else:
            await other.pop_item()

    for n in range(1, 6):
        await _runner_turn(watcher, n, interfere)
        await _runner_turn(watcher, 100 + n)  # the next check sees a change made after a hook
        if not watcher.compactions:
            expected = await watcher.get_items()
            assert seen[-1]["session_items"] == expected, (n, step, change)
            assert seen[-1]["estimated_tokens"] == sum(await estimator.count_items(expected))
        else:
            break
    if change == "add":
        # 10 + 4 per turn pair + 3 per interference crosses 30 in the 3rd pair.
        assert watcher.compactions == 1
        record = (await watcher.get_compaction_records())[-1]
        assert record.archived > 0
    await watcher.close()
    await other.close()


@pytest.mark.asyncio
async def test_a_trigger_that_modifies_its_lists_does_not_corrupt_later_checks() -> None:
    seen: list[list[Any]] = []

    def meddling(context: CompactionTriggerContext) -> bool:
        seen.append(list(context["session_items"]))
        context["session_items"].append(msg("injected"))
        context["compaction_candidate_items"].clear()
        return False

    session = CompactionSession(InMemorySession(sid()), should_trigger_compaction=meddling)
    await session.add_items([msg("a"), msg("b", "assistant")])
    await session.run_compaction()
    await session.add_items([msg("c")])
    await session.run_compaction()
    assert seen[-1] == [msg("a"), msg("b", "assistant"), msg("c")]


@pytest.mark.asyncio
async def test_default_trigger_uses_the_token_estimate() -> None:
    estimator = TokenEstimator(encoding=None)
    session = CompactionSession(
        InMemorySession(sid()),
        should_trigger_compaction=token_threshold_trigger(1000),
        keep_last=1,
        token_estimator=estimator,
    )
    await session.add_items([msg("x" * 400) for _ in range(5)])  # 5 * (100 + 4) = 520 tokens
    await session.run_compaction({"response_id": "r"})
    assert await session.get_compaction_records() == []
    await session.add_items([msg("x" * 400) for _ in range(5)])  # 1040 tokens
    await session.run_compaction({"response_id": "r"})
    assert len(await session.get_compaction_records()) == 1


@pytest.mark.asyncio
async def test_token_estimator_methods() -> None:
    plain = TokenEstimator(encoding=None)
    assert await plain.count_items([msg("abcdefgh"), msg("")]) == [2 + 4, 0 + 4]
    assert plain.method == "offline"
    unknown = TokenEstimator(encoding="no-such-encoding", load_timeout=5)
    assert await unknown.count_items([msg("abcd")]) == [5]  # falls back, never raises
    assert unknown.method == "offline"

    class FakeEncoding:
        def encode(self, text: str, disallowed_special: Any = ()) -> list[int]:
            return [0] * len(text.split())

    fake = TokenEstimator()
    fake._encoding = FakeEncoding()
    assert await fake.count_items([msg("one two three")]) == [3 + 4]
    assert fake.method == "tiktoken:o200k_base"
    big = [msg("word " * 50_000)]
    assert await fake.count_items(big) == [50_000 + 4]  # tokenized in a worker thread
