"""Test-wide settings, and the guard that leaves the shared servers as the run found them."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import uuid
import warnings
from collections.abc import Iterator

import pytest
from agents import set_tracing_disabled
from hypothesis import settings
from hypothesis.internal.conjecture import engine as hypothesis_engine

from tests.servers import RUN, drop_sql_tables, remove_run, snapshot, sql_up

set_tracing_disabled(True)  # no API key here: keep the SDK from trying to export traces

# Hypothesis shrinks a failure for up to 300 s, pytest-timeout ends a test at 300 s: a failing
# property test died mid-shrink and reported a timeout (or a Flaky error from the interrupted
# replay) instead of its minimal case. Shrinking now stops in time to print the smallest case
# found, and the failure blob replays it (`@reproduce_failure`).
SHRINK_SECONDS = 60
hypothesis_engine.MAX_SHRINKING_SECONDS = SHRINK_SECONDS
settings.register_profile("agent_sessions", print_blob=True, deadline=None)
settings.load_profile("agent_sessions")

LEFTOVERS: list[str] = []
UNCLOSED: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    # A driver connection dropped unclosed mid-run warns when collected (ResourceWarning is
    # ignored by default): show it in the warnings summary, next to the test that was running.
    warnings.filterwarnings("always", "unclosed connection", ResourceWarning)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when it left driver connections unclosed: collect its garbage while
    ``warnings`` still works and list the asyncpg connections still open. Left for interpreter
    exit, they printed only "Exception ignored in Connection.__del__ ... no attribute 'warn'"
    after the summary (issue 41: tests/test_text_index_upgrade.py held a shared engine)."""
    with warnings.catch_warnings(record=True) as collected:
        warnings.simplefilter("always")
        gc.collect()
    UNCLOSED[:] = [str(w.message) for w in collected if "unclosed connection" in str(w.message)]
    asyncpg = sys.modules.get("asyncpg.connection")
    if asyncpg is not None:
        UNCLOSED.extend(
            f"open and still referenced: {conn!r}"
            for conn in gc.get_objects()
            if isinstance(conn, asyncpg.Connection) and not conn.is_closed()
        )
    if UNCLOSED and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def _servers_left_as_found() -> Iterator[None]:
    """Remove what this run put on the shared Redis, PostgreSQL and MariaDB (every name carrying
    ``tests.servers.RUN``), then list what else appeared meanwhile: a test that writes an
    untagged name, or a concurrent run."""
    if os.environ.get("AGENT_SESSIONS_TEST_GUARD"):  # a pytest run inside a test: its parent
        yield  # removes what both put there, after both
        return
    os.environ["AGENT_SESSIONS_TEST_GUARD"] = RUN
    before = asyncio.run(snapshot())
    yield
    asyncio.run(remove_run(RUN))
    groups: dict[str, int] = {}
    for name in asyncio.run(snapshot()) - before:
        # Per table, and per Redis key prefix: "redis/0/app:{id}:items" -> "redis/0/app:"
        where, _, rest = name.partition("/")
        if where == "redis":
            db, _, key = rest.partition("/")
            group = f"redis/{db}/{key.split('{', 1)[0]}"
        else:
            group = f"{where}/{rest.split('/', 1)[0]}"
        groups[group] = groups.get(group, 0) + 1
    LEFTOVERS[:] = [f"{group} ({n} new)" for group, n in sorted(groups.items())]


@pytest.fixture
def sql_prefix() -> Iterator[str]:
    """A table prefix of this test's own (carrying the run's tag); its tables are dropped from
    PostgreSQL and MariaDB after the test."""
    prefix = f"{RUN}{uuid.uuid4().hex[:6]}_"
    yield prefix
    for url in sql_up().values():
        asyncio.run(drop_sql_tables(url, prefix))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the fault-injection tests injected and checked (tests/test_faults.py), and
    what the run left on the shared servers."""
    from tests.fault_report import LINES, SEED

    if LINES and SEED:  # only tests/test_faults.py draws from the seed
        terminalreporter.write_line(f"[faults] FAULT_SEED={SEED[0]} replays this run")
    for line in LINES:
        terminalreporter.write_line(line)
    if LEFTOVERS:
        terminalreporter.write_line(
            f"[servers] keys, tables or session rows appeared during this run (run tag {RUN}) "
            "and are still there: left by an untagged test, or by a concurrent run"
        )
        for name in LEFTOVERS[:40]:
            terminalreporter.write_line(f"[servers]   {name}")
    if UNCLOSED:
        terminalreporter.write_line(
            f"[connections] {len(UNCLOSED)} driver connection(s) left unclosed: the run fails "
            "(PYTHONASYNCIODEBUG=1 shows where each was opened):"
        )
        for line in UNCLOSED[:10]:
            terminalreporter.write_line(f"[connections]   {line}")
