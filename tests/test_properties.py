"""Stateful property tests: every stack of the matrix against a plain reference model.

Hypothesis drives random sequences of add, pop, clear, branch create/switch/delete, forced
compaction, key rotation, TTL clock advances and "reopen as a new object" against each stack of
``tests/matrix.py`` over memory, SQLite and Redis, and after every step compares what the stack
shows with :class:`Model`. CI runs a few short examples per stack; ``make props`` runs long ones
(``AGENT_SESSIONS_PROPS=long``, which adds PostgreSQL, MariaDB and the MongoDB stand-in).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from agents.memory import Session
from cryptography.fernet import Fernet
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from agent_sessions import BranchingSession, CompactionSession, EncryptedSession
from agent_sessions.core.capabilities import Capability, supports
from agent_sessions.errors import BranchError
from agent_sessions.wrappers.branching import log as branch_log
from tests import matrix
from tests.matrix import (
    BACKENDS,
    CLOCK,
    DAY,
    FOREIGN_BACKEND,
    KEY,
    KEYRING,
    REDIS_PREFIX,
    STACKS,
    Backend,
)
from tests.servers import REDIS_URL, drop_redis_keys

LONG = os.environ.get("AGENT_SESSIONS_PROPS") == "long"
SETTINGS = settings(
    max_examples=120 if LONG else 3,
    stateful_step_count=40 if LONG else 10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
BACKEND_NAMES = [b.name for b in BACKENDS] if LONG else ["memory", "sqlite", "redis"]

Entry = tuple[str, str]  # (role, text) of a message item


@dataclass
class Model:
    """What the stack must show: the items of each branch and the current branch."""

    branches: dict[str, list[Entry]] = field(default_factory=lambda: {"main": []})
    current: str = "main"

    @property
    def items(self) -> list[Entry]:
        return self.branches[self.current]

    def reset(self) -> None:
        self.branches = {"main": []}
        self.current = "main"


def _entries(items: list[Any]) -> list[Entry]:
    return [(item["role"], item["content"]) for item in items]


@pytest.fixture(scope="module", autouse=True)
def _frequent_branch_checkpoints() -> Iterator[None]:
    """Checkpoint the branch log every 3 records and let new objects read 5: reopened objects
    then fold from checkpoints, and sometimes find none in their first page."""
    saved = branch_log.CHECKPOINT_EVERY, branch_log.PAGE
    branch_log.CHECKPOINT_EVERY, branch_log.PAGE = 3, 5
    yield
    branch_log.CHECKPOINT_EVERY, branch_log.PAGE = saved


@pytest.fixture(scope="module", autouse=True)
def _restore_and_drop() -> Iterator[None]:
    yield
    CLOCK.offset = 0.0
    KEYRING.clear()
    KEYRING["k0"] = KEY
    with contextlib.suppress(Exception):
        asyncio.run(drop_redis_keys(REDIS_URL, f"{REDIS_PREFIX}*"))


class StackMachine(RuleBasedStateMachine):
    """One session id through one stack over one backend, checked against :class:`Model`."""

    backend: Backend
    stack_name: str

    def __init__(self) -> None:
        super().__init__()
        CLOCK.offset = 0.0
        KEYRING.clear()
        KEYRING["k0"] = KEY
        self.loop = asyncio.new_event_loop()
        self.sid = f"prop-{uuid.uuid4().hex[:12]}"
        self.model = Model()
        self.counter = 0
        self.epoch = 0.0
        """Clock offset when the stack last became empty: every stored write is newer."""
        self.session: Any = self.run(self._open())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _open(self) -> Session:
        return STACKS[self.stack_name](await self.backend.open(self.sid))

    def teardown(self) -> None:
        try:
            self.run(self.session.clear_session())
            self.run(_close(self.session))
        finally:
            self.loop.close()
            CLOCK.offset = 0.0

    # -- what the stack offers -------------------------------------------------------------

    @property
    def branching(self) -> bool:
        return isinstance(self.session, BranchingSession)

    @property
    def compacting(self) -> bool:
        return isinstance(self.session, CompactionSession)

    @property
    def expiring(self) -> bool:
        return "ttl" in self.stack_name

    def _name(self) -> str:
        self.counter += 1
        return f"n{self.counter}"

    # -- rules -------------------------------------------------------------------------------

    @rule(roles=st.lists(st.sampled_from(["user", "assistant"]), min_size=1, max_size=3))
    def add(self, roles: list[str]) -> None:
        batch = [(role, self._name()) for role in roles]
        self.run(self.session.add_items([{"role": r, "content": t} for r, t in batch]))
        self.model.items.extend(batch)

    @rule()
    def pop(self) -> None:
        popped = self.run(self.session.pop_item())
        expected = self.model.items.pop() if self.model.items else None
        assert (None if popped is None else (popped["role"], popped["content"])) == expected

    @rule()
    def clear(self) -> None:
        self.run(self.session.clear_session())
        self.model.reset()
        self.epoch = CLOCK.offset

    @rule()
    def reopen(self) -> None:
        self.run(_close(self.session))
        self.session = self.run(self._open())

    @precondition(lambda self: self.branching)
    @rule(turn=st.integers(1, 4))
    def create_branch(self, turn: int) -> None:
        users = [i for i, (role, _) in enumerate(self.model.items) if role == "user"]
        name = self._name()
        if turn > len(users):
            with pytest.raises(BranchError):
                self.run(self.session.create_branch_from_turn(turn, name))
            return
        assert self.run(self.session.create_branch_from_turn(turn, name)) == name
        self.model.branches[name] = self.model.items[: users[turn - 1]]
        self.model.current = name

    @precondition(lambda self: self.branching)
    @rule(pick=st.integers(0, 7))
    def switch(self, pick: int) -> None:
        names = sorted(self.model.branches)
        name = names[pick % len(names)]
        self.run(self.session.switch_to_branch(name))
        self.model.current = name

    @precondition(lambda self: self.branching)
    @rule(pick=st.integers(0, 7))
    def delete_branch(self, pick: int) -> None:
        names = sorted(n for n in self.model.branches if n not in ("main", self.model.current))
        if not names:
            return
        name = names[pick % len(names)]
        self.run(self.session.delete_branch(name))
        del self.model.branches[name]

    @precondition(lambda self: self.compacting)
    @rule()
    def compact(self) -> None:
        self.run(self.session.compact())  # the identity summariser keeps the view exact

    @precondition(lambda self: _encryption_layer(self.session) is not None)
    @rule()
    def rotate(self) -> None:
        new = f"k-{self._name()}"
        KEYRING[new] = Fernet.generate_key().decode()
        self.reopen()
        layer = _encryption_layer(self.session)
        assert layer is not None
        if not supports(layer, Capability.REWRITE):  # over ForeignSession: refused, untouched
            with pytest.raises(NotImplementedError, match="REWRITE"):
                self.run(layer.rotate())
            del KEYRING[new]
            self.reopen()
            return
        self.run(layer.rotate())  # re-encrypts the whole family in place
        for old in [k for k in KEYRING if k != new]:
            del KEYRING[old]  # the old keys are gone: everything must still read
        self.reopen()

    # Nothing expires while every write is younger than the ttl, and everything does once all
    # writes are older: both hold per store, so the model needs no family semantics.
    @precondition(lambda self: self.expiring and CLOCK.offset - self.epoch < DAY / 2)
    @rule()
    def advance_within_ttl(self) -> None:
        CLOCK.offset += DAY / 4

    @precondition(lambda self: self.expiring)
    @rule()
    def advance_past_ttl(self) -> None:
        CLOCK.offset += DAY + 60
        self.model.reset()  # every store of the family had its last write over a day ago
        self.epoch = CLOCK.offset

    # -- checks ------------------------------------------------------------------------------

    @invariant()
    def shows_the_model(self) -> None:
        assert _entries(self.run(self.session.get_items())) == self.model.items
        assert _entries(self.run(self.session.get_items(limit=2))) == self.model.items[-2:]
        if self.branching:
            listed = self.run(self.session.list_branches())
            assert {b["branch_id"] for b in listed} == set(self.model.branches)
            for name, items in self.model.branches.items():
                got = self.run(self.session.get_items(branch_id=name))
                assert _entries(got) == items, name


def _encryption_layer(session: Any) -> EncryptedSession | None:
    """The EncryptedSession in ``session``'s stack (following ``.inner``), or None."""
    while session is not None:
        if isinstance(session, EncryptedSession):
            return session
        session = getattr(session, "inner", None)
    return None


async def _close(session: Any) -> None:
    result = session.close()
    if asyncio.iscoroutine(result) or hasattr(result, "__await__"):
        await result


FOREIGN_STACKS = list(STACKS) if LONG else ["bare", "branching", "compaction", "advanced-ttl"]
"""Stacks also run over the SDK's SQLiteSession through ForeignSession."""


@pytest.mark.parametrize(
    ("backend", "stack"),
    [(b, s) for b in BACKEND_NAMES for s in STACKS]
    + [(FOREIGN_BACKEND.name, s) for s in FOREIGN_STACKS],
)
def test_stack_matches_the_reference_model(backend: str, stack: str) -> None:
    chosen = next(b for b in [*matrix.BACKENDS, FOREIGN_BACKEND] if b.name == backend)
    if chosen.needs is not None:
        chosen.needs()
    machine = type(
        f"Machine_{backend}_{stack}".replace("-", "_"),
        (StackMachine,),
        {"backend": chosen, "stack_name": stack},
    )
    run_state_machine_as_test(machine, settings=SETTINGS)
