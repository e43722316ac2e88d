"""Does background compaction hold up a turn?  ``python benchmarks/bench_compaction.py [--quick]``

Times one turn through ``Runner.run_streamed`` (ScriptedModel; from the call to the end of the
event stream) on a SQLite file session, interleaving the contenders turn by turn:

* ``plain``: the SQLite session, no compaction;
* ``background``: ``CompactionSession(background=True)`` whose summarizer sleeps 500 ms and whose
  trigger fires after every turn (each turn's hook starts or queues a compaction);
* ``wrapper, no trigger``: the wrapper whose trigger never fires (its read overhead only);
* ``foreground``: the same sleepy summarizer with ``background=False`` (what a turn would wait).

Target: ``background`` within 1.1x of ``plain`` (median turn time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, Runner
from agents.testing import ScriptedModel, assistant_message

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agent_sessions import SQLiteSession
from agent_sessions.wrappers.compaction import (
    CompactionSession,
    ExtractiveSummarizer,
    item_count_trigger,
)

SUMMARY_SECONDS = 0.5


class SleepySummarizer:
    """The extractive summary, after 500 ms (a stand-in for a model call)."""

    name = "sleepy"

    def __init__(self) -> None:
        self.calls = 0
        self._inner = ExtractiveSummarizer()

    async def summarize(self, items: list[Any], *, previous_summary: list[Any]) -> list[Any]:
        self.calls += 1
        await asyncio.sleep(SUMMARY_SECONDS)
        return await self._inner.summarize(items, previous_summary=previous_summary)


@dataclass
class Contender:
    name: str
    session: Any
    agent: Agent[Any]
    turns: int
    times: list[float] = field(default_factory=list)


def scripted(turns: int) -> Agent[Any]:
    replies = [
        [assistant_message(f"answer {i} " + "z" * 300, item_id=f"m{i}")] for i in range(turns)
    ]
    return Agent(name="bench", instructions="Be brief.", model=ScriptedModel(replies))


async def one_turn(c: Contender, turn: int) -> None:
    start = time.perf_counter()
    result = Runner.run_streamed(c.agent, f"question {turn} " + "y" * 300, session=c.session)
    async for _ in result.stream_events():
        pass
    c.times.append(time.perf_counter() - start)


async def main(turns: int, foreground_turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        summarizer = SleepySummarizer()

        def sqlite() -> SQLiteSession:
            return SQLiteSession(f"bench-{uuid.uuid4().hex[:8]}", path)

        contenders = [
            Contender("plain", sqlite(), scripted(turns), turns),
            Contender(
                "background",
                CompactionSession(
                    sqlite(),
                    summarizer=summarizer,
                    should_trigger_compaction=item_count_trigger(2),
                    keep_last=4,
                    background=True,
                ),
                scripted(turns),
                turns,
            ),
            Contender(
                "wrapper, no trigger",
                CompactionSession(sqlite(), should_trigger_compaction=lambda ctx: False),
                scripted(turns),
                turns,
            ),
            Contender(
                "foreground",
                CompactionSession(
                    sqlite(),
                    summarizer=SleepySummarizer(),
                    should_trigger_compaction=item_count_trigger(2),
                    keep_last=4,
                ),
                scripted(foreground_turns),
                foreground_turns,
            ),
        ]
        for c in contenders:  # warm-up: connection, schema, tokenizer loading
            await c.session.add_items([{"role": "user", "content": "warm-up"}])
            await c.session.get_items()
            await c.session.clear_session()
        for turn in range(turns):
            for c in contenders:
                if turn < c.turns:
                    await one_turn(c, turn)
        background = contenders[1].session
        await background.wait_for_compaction()
        view = await background.get_items()
        archived = await background.get_archived_items()
        base = statistics.median(contenders[0].times)
        print(
            f"\n## One turn through Runner.run_streamed (SQLite file; {turns} turns; "
            f"summarizer sleeps {SUMMARY_SECONDS * 1000:.0f} ms)\n"
        )
        print(f"{'contender':22}{'median ms':>11}{'p90 ms':>10}{'max ms':>10}{'vs plain':>10}")
        for c in contenders:
            times = sorted(c.times)
            p90 = times[int(0.9 * (len(times) - 1))]
            median = statistics.median(times)
            print(
                f"{c.name:22}{median * 1000:>11.2f}{p90 * 1000:>10.2f}"
                f"{times[-1] * 1000:>10.2f}{median / base:>10.2f}x"
            )
        print(
            f"\nbackground: {summarizer.calls} compactions committed or attempted during the "
            f"run; final view {len(view)} items, {len(archived)} originals archived"
        )
        for c in contenders:
            await c.session.clear_session()
            await c.session.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(turns=20 if args.quick else 60, foreground_turns=3 if args.quick else 5))
