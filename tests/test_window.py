"""WindowSession and window_input_callback: the model's view is valid input, within budget, and
the store is untouched; over every backend, over CompactionSession, and in Runner runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.extensions.memory import AdvancedSQLiteSession
from agents.memory import SQLiteSession as SDKSQLiteSession
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sessions import CompactionSession, InMemorySession, SQLiteSession
from agent_sessions.wrappers.compaction import item_count_trigger
from agent_sessions.wrappers.window import (
    MicroCompaction,
    WindowSession,
    plan_start,
    window_input_callback,
)
from agent_sessions.wrappers.window.plan import WindowBudget
from tests.matrix import BACKENDS, REDIS_PREFIX, SQL_PREFIX, SQL_URLS, Backend
from tests.servers import REDIS_URL, drop_redis_keys, drop_sql_tables
from tests.window_histories import (
    ESTIMATOR,
    budgets,
    histories,
    is_user,
    micros,
    problems,
    reference_start,
    shown,
    tokens,
)

EXAMPLES = int(os.environ.get("WINDOW_EXAMPLES", "8"))
"""Examples per backend; `make test-window-long` runs many more."""

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
)


@pytest.fixture(scope="module", autouse=True)
def _drop_leftovers_at_end() -> Iterator[None]:
    yield
    for url in SQL_URLS.values():
        with contextlib.suppress(Exception):
            asyncio.run(drop_sql_tables(url, SQL_PREFIX))
    with contextlib.suppress(Exception):
        asyncio.run(drop_redis_keys(REDIS_URL, f"{REDIS_PREFIX}*"))


def _flatten(batches: list[list[Any]]) -> list[Any]:
    return [item for batch in batches for item in batch]


def _check_view(
    view: list[Any],
    history: list[Any],
    max_turns: int | None,
    max_tokens: int | None,
    micro: MicroCompaction | None,
) -> None:
    start = len(history) - len(view)
    assert view == shown(history, micro)[start:], "the view is the shown suffix of the history"
    assert problems(view, history[start - 1] if start else None) == []
    if max_tokens is not None:
        assert tokens(view) <= max_tokens
    if max_turns is not None:
        assert sum(1 for item in view if is_user(item)) <= max_turns
    assert start == reference_start(history, max_turns, max_tokens, micro)


# -- the planning, pure ----------------------------------------------------------------------


@settings(max_examples=EXAMPLES * 12, deadline=None)
@given(histories(max_turns=14), budgets, micros, st.integers(0, 300))
def test_plan_matches_the_brute_force_reference(
    batches: list[list[Any]],
    budget: tuple[int | None, int | None],
    micro: MicroCompaction | None,
    reserved: int,
) -> None:
    history = _flatten(batches)
    display = shown(history, micro)
    counts = [ESTIMATOR.count_item(i) for i in display]
    start = plan_start(
        display, counts, WindowBudget(*budget), complete=True, reserved_tokens=reserved
    )
    assert start == reference_start(history, *budget, micro, reserved)
    # Any newer part of the history decides the same start once it reaches far enough back.
    for cut in range(len(history)):
        partial = plan_start(
            display[cut:],
            counts[cut:],
            WindowBudget(*budget),
            complete=False,
            reserved_tokens=reserved,
        )
        assert partial is None or partial + cut == start


# -- WindowSession over every backend --------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS, ids=[b.name for b in BACKENDS])
def test_window_is_valid_and_within_budget_over_every_backend(backend: Backend) -> None:
    if backend.needs is not None:
        backend.needs()
    loop = asyncio.new_event_loop()

    @SETTINGS
    @given(histories(), budgets, micros)
    def check(
        batches: list[list[Any]],
        budget: tuple[int | None, int | None],
        micro: MicroCompaction | None,
    ) -> None:
        async def run() -> None:
            inner = await backend.open(f"window-{uuid.uuid4().hex[:12]}")
            try:
                for batch in batches:
                    await inner.add_items(batch)
                history = _flatten(batches)
                session = WindowSession(
                    inner,
                    max_turns=budget[0],
                    max_tokens=budget[1],
                    micro_compaction=micro,
                    token_estimator=ESTIMATOR,
                )
                view = await session.get_items()
                _check_view(view, history, *budget, micro)
                for limit in (1, 3):
                    assert await session.get_items(limit) == view[-limit:]
                assert await session.get_full_items() == history  # the store is untouched
                assert await inner.get_items() == history
            finally:
                await inner.clear_session()
                close = getattr(inner, "close", None)
                if close is not None:
                    result = close()
                    if asyncio.iscoroutine(result):
                        await result

        loop.run_until_complete(run())

    try:
        check()
    finally:
        loop.close()


@settings(max_examples=40, deadline=None)
@given(histories(), budgets, micros)
def test_window_over_a_session_without_sequence_numbers(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[list[Any]],
    budget: tuple[int | None, int | None],
    micro: MicroCompaction | None,
) -> None:
    """The SDK's own SQLiteSession has no sequence numbers: pages are growing get_items(k)."""

    async def run() -> None:
        inner = SDKSQLiteSession(f"w-{uuid.uuid4().hex[:8]}")
        try:
            for batch in batches:
                await inner.add_items(batch)  # type: ignore[arg-type]
            session = WindowSession(
                inner,
                max_turns=budget[0],
                max_tokens=budget[1],
                micro_compaction=micro,
                token_estimator=ESTIMATOR,
            )
            _check_view(await session.get_items(), _flatten(batches), *budget, micro)
        finally:
            inner.close()

    asyncio.run(run())


@settings(max_examples=60, deadline=None)
@given(histories(max_turns=12), budgets, micros)
def test_callback_is_the_same_window_plus_the_new_input(
    batches: list[list[Any]],
    budget: tuple[int | None, int | None],
    micro: MicroCompaction | None,
) -> None:
    history = _flatten(batches)
    new: list[Any] = [{"role": "user", "content": "next question " * 10}]
    combine = window_input_callback(
        max_turns=budget[0],
        max_tokens=budget[1],
        micro_compaction=micro,
        token_estimator=ESTIMATOR,
    )
    combined: list[Any] = asyncio.run(_call(combine, history, new))
    assert combined[-1:] == new
    view = combined[:-1]
    start = len(history) - len(view)
    assert view == shown(history, micro)[start:]
    assert problems(view, history[start - 1] if start else None) == []
    assert start == reference_start(history, *budget, micro, reserved=tokens(new))


async def _call(combine: Any, history: list[Any], new: list[Any]) -> list[Any]:
    result: list[Any] = await combine(list(history), list(new))
    return result


# -- behaviour ---------------------------------------------------------------------------------


def _turn(i: int, output_chars: int = 50) -> list[Any]:
    return [
        {"role": "user", "content": f"q{i}"},
        {"type": "reasoning", "id": f"rs{i}", "summary": []},
        {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{i}", "output": "o" * output_chars},
        {"role": "assistant", "content": f"a{i}"},
    ]


@pytest.mark.asyncio
async def test_cut_moves_forward_past_a_call_whose_output_follows() -> None:
    inner = InMemorySession("cut")
    for i in range(3):
        await inner.add_items(_turn(i))
    # 7 items fit by tokens would start inside turn 1 at its function call's output.
    budget = sum(ESTIMATOR.count_item(x) for x in _turn(2)) + ESTIMATOR.count_item(_turn(1)[-1])
    view = await WindowSession(inner, max_tokens=budget + 1, token_estimator=ESTIMATOR).get_items()
    assert view == _turn(1)[-1:] + _turn(2)
    assert await WindowSession(inner, max_turns=2).get_items() == _turn(1) + _turn(2)


@pytest.mark.asyncio
async def test_micro_compaction_shortens_older_outputs_and_keeps_the_originals() -> None:
    inner = SQLiteSession("micro", ":memory:")
    for i in range(4):
        await inner.add_items(_turn(i, output_chars=5000))
    micro = MicroCompaction(keep_turns=1, max_chars=1000, head=200, tail=100)
    session = WindowSession(inner, micro_compaction=micro)
    view: list[Any] = await session.get_items()
    outputs = [x["output"] for x in view if x.get("type") == "function_call_output"]
    assert [len(o) for o in outputs[-1:]] == [5000]  # the newest turn is whole
    for output in outputs[:-1]:
        assert output.startswith("o" * 200) and output.endswith("o" * 100)
        assert "4700 of 5000 characters omitted" in output
    assert view == await session.get_items()  # deterministic
    stored: list[Any] = await session.get_full_items()
    assert [x["output"] for x in stored if "output" in x] == ["o" * 5000] * 4
    assert await session.pop_item() == _turn(3)[-1]


@pytest.mark.asyncio
async def test_window_does_not_read_the_whole_history() -> None:
    inner = InMemorySession("reads")
    for i in range(400):
        await inner.add_items(_turn(i))
    pages: list[int | None] = []
    original = inner.get_sequenced_items

    async def counting(limit: int | None = None, **kw: Any) -> Any:
        pages.append(limit)
        return await original(limit, **kw)

    inner.get_sequenced_items = counting  # type: ignore[method-assign]
    session = WindowSession(inner, max_turns=3)
    assert len(await session.get_items()) == 15
    assert all(p is not None for p in pages) and sum(p for p in pages if p) < 100
    pages.clear()
    await session.get_items()
    assert len(pages) == 1  # the page size learned from the previous read suffices


@pytest.mark.asyncio
async def test_summary_stays_in_front_of_the_window() -> None:
    compaction = CompactionSession(
        InMemorySession("pinned"),
        should_trigger_compaction=item_count_trigger(12),
        keep_last=6,
        compact_on_write=True,
    )
    for i in range(6):
        await compaction.add_items(_turn(i))
    summary: list[Any]
    tail: list[Any]
    summary, tail = await compaction.get_summary_and_tail()
    assert summary and tail
    view = await WindowSession(compaction, max_turns=1).get_items()
    last_user = max(i for i, x in enumerate(tail) if is_user(x))
    assert view == summary + tail[last_user:]
    tight = sum(ESTIMATOR.count_item(x) for x in summary) - 1
    view = await WindowSession(compaction, max_tokens=tight, token_estimator=ESTIMATOR).get_items()
    assert view and view[0] not in summary  # a summary that does not fit is left out


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_turns": 0},
        {"max_tokens": -1},
        {"max_turns": 1.5},
        {"max_tokens": True},
        {"reserve_tokens": -1},
    ],
)
def test_bad_bounds_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        WindowSession(InMemorySession("bad"), **kwargs)


def test_bad_micro_compaction_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        MicroCompaction(max_chars=10, head=8, tail=8)
    with pytest.raises(TypeError, match="MicroCompaction"):
        WindowSession(InMemorySession("bad"), micro_compaction={"keep_turns": 1})  # type: ignore[arg-type]


# -- Runner ------------------------------------------------------------------------------------


def _texts(items: Any) -> list[str]:
    out = []
    for item in items:
        content = item.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.append("".join(part.get("text", "") for part in content))
    return out


@pytest.mark.asyncio
async def test_runner_model_receives_the_window() -> None:
    steps: list[Any] = []
    for t in range(5):
        steps.append([function_call("lookup", '{"q": 1}', call_id=f"call{t}")])
        steps.append([assistant_message(f"answer {t}")])
    model = ScriptedModel(steps)

    def lookup(q: int) -> str:
        return "r" * 3000

    from agents import function_tool

    agent = Agent(name="a", model=model, tools=[function_tool(lookup)])
    store = SQLiteSession("runner-window", ":memory:")
    micro = MicroCompaction(keep_turns=1, max_chars=1000, head=100, tail=100)
    session = WindowSession(store, max_turns=2, micro_compaction=micro)
    for t in range(5):
        await Runner.run(agent, f"question {t}", session=session)
    seen = model.calls[-2].input  # the last turn's first model call: history + new input
    assert isinstance(seen, list)
    texts = _texts(seen)
    assert texts == ["question 2", "answer 2", "question 3", "answer 3", "question 4"]
    outputs = [x for x in seen if x.get("type") == "function_call_output"]
    calls = {x["call_id"] for x in seen if x.get("type") == "function_call"}
    assert {x["call_id"] for x in outputs} <= calls
    assert "micro-compacted" in outputs[0]["output"] and len(outputs[-1]["output"]) == 3000
    assert len(await store.get_items()) == 5 * 4  # nothing stored was dropped or shortened
    stored: list[Any] = await store.get_items()
    assert all(len(x["output"]) == 3000 for x in stored if "output" in x)


@pytest.mark.asyncio
async def test_runner_with_the_callback_sees_the_same_window() -> None:
    model = ScriptedModel([[assistant_message(f"answer {t}")] for t in range(4)])
    agent = Agent(name="a", model=model)
    store = AdvancedSQLiteSession(session_id="cb", create_tables=True)
    config = RunConfig(session_input_callback=window_input_callback(max_turns=2))
    for t in range(4):
        await Runner.run(agent, f"question {t}", session=store, run_config=config)
    assert _texts(model.calls[-1].input) == [
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
        "question 3",
    ]
    assert len(await store.get_items()) == 8
    store.close()


@pytest.mark.asyncio
async def test_runner_sees_the_summary_then_the_window() -> None:
    """Window over CompactionSession in Runner runs: summary + the newest turns."""
    model = ScriptedModel([[assistant_message(f"answer {t}")] for t in range(8)])
    agent = Agent(name="a", model=model)
    compaction = CompactionSession(
        SQLiteSession("runner-pinned", ":memory:"),
        should_trigger_compaction=item_count_trigger(8),
        keep_last=6,
    )
    session = WindowSession(compaction, max_turns=2)
    for t in range(8):
        await Runner.run(agent, f"question {t}", session=session)
    seen: Any = model.calls[-1].input
    assert seen[0]["role"] == "developer"  # the summary the hook made, kept in front
    assert seen[0]["content"].startswith("Summary of the earlier conversation")
    assert _texts(seen[1:]) == ["question 5", "answer 5", "question 6", "answer 6", "question 7"]
    assert compaction.compactions > 0  # the Runner's hook reached the CompactionSession
    summary, tail = await compaction.get_summary_and_tail()
    assert summary and len(tail) > 4  # the window cut more than compaction did
