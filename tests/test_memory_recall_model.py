"""Recall against a plain reference model (hypothesis stateful): any sequence of indexing
(racing writers index an item twice), forgetting, snapshots and cold objects leaves every
reader finding exactly the live entries, on both search paths."""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from agent_sessions import InMemorySession, InMemoryStore, SQLiteSession
from agent_sessions.memory.recall import RecallIndex
from tests.test_memory_recall import recall_of

WORDS = ["apple", "pear", "plum", "fig"]
SESSIONS = ["a", "b", "c"]


def item(session: str, seq: int) -> dict[str, Any]:
    """The item a session holds at ``seq`` (the same for every writer that indexes it)."""
    role = "user" if seq % 2 else "assistant"
    return {"role": role, "content": f"{WORDS[seq % len(WORDS)]} {WORDS[(seq * 3) % 4]} {session}"}


class RecallModel(RuleBasedStateMachine):
    path = "in-process"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.root: Any = self.open_root()
        self.live: dict[tuple[str, int], dict[str, Any]] = {}
        self.readers: list[RecallIndex] = []

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def open_root(self) -> Any:
        return InMemorySession("scope", store=InMemoryStore())

    def teardown(self) -> None:
        self.run(self.root.close())
        self.loop.close()

    @initialize()
    def readers_start(self) -> None:
        self.readers = [recall_of(self.root, self.path) for _ in range(2)]
        for reader in self.readers:
            reader.snapshot_every = 4

    @rule(
        writer=st.integers(0, 1),
        session=st.sampled_from(SESSIONS),
        seqs=st.lists(st.integers(1, 8), min_size=1, max_size=3),
    )
    def index(self, writer: int, session: str, seqs: list[int]) -> None:
        pairs = [(seq, item(session, seq)) for seq in seqs]
        self.run(self.readers[writer].index(session, pairs))
        for seq, value in pairs:
            self.live.setdefault((session, seq), value)

    @rule(writer=st.integers(0, 1), session=st.sampled_from(SESSIONS))
    def forget(self, writer: int, session: str) -> None:
        self.run(self.readers[writer].forget(session))
        self.live = {key: value for key, value in self.live.items() if key[0] != session}

    @rule(reader=st.integers(0, 1))
    def snapshot(self, reader: int) -> None:
        self.run(self.readers[reader].refresh())
        self.run(self.readers[reader].save_snapshot())

    @rule(reader=st.integers(0, 1))
    def cold(self, reader: int) -> None:
        self.readers[reader] = recall_of(self.root, self.path)

    @rule(
        reader=st.integers(0, 1), word=st.sampled_from(WORDS), role=st.sampled_from(["user", None])
    )
    def search(self, reader: int, word: str, role: str | None) -> None:
        roles = [role] if role else None
        hits = self.run(self.readers[reader].search(word, roles=roles, limit=100))
        found = sorted((h.session_id, h.seq, h.role, h.text) for h in hits)
        expected = sorted(
            (session, seq, value["role"], value["content"])
            for (session, seq), value in self.live.items()
            if word in value["content"].split() and role in (None, value["role"])
        )
        assert found == expected
        assert all(h.score > 0 for h in hits)


class NativeRecallModel(RecallModel):
    path = "native"


class SQLiteRecallModel(NativeRecallModel):
    """The native path on SQLite's FTS5 (a new file per example)."""

    def open_root(self) -> Any:
        self.folder = tempfile.TemporaryDirectory()
        return SQLiteSession("scope", os.path.join(self.folder.name, "m.db"))

    def teardown(self) -> None:
        super().teardown()
        self.folder.cleanup()


settings_ = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestRecallInProcess = RecallModel.TestCase
TestRecallInProcess.settings = settings_
TestRecallNative = NativeRecallModel.TestCase
TestRecallNative.settings = settings_
TestRecallSQLite = SQLiteRecallModel.TestCase
TestRecallSQLite.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)
