"""The OpenAI Agents SDK's own session tests, run against this package's classes.

Each case runs one SDK test file (from the sdist of the installed ``openai-agents``, fetched
once into ``.cache/sdk-tests/``) in a pytest subprocess with our classes under the SDK's
names (``tests/sdk_compat/sdk_swap.py``), on one store. It passes when every SDK test outside
``tests/sdk_compat/exclusions.py`` passes and every exclusion still names a collected test.
The default run takes the ``CI`` cases (a budgeted selection); ``make sdk-tests`` (or
``AGENT_SESSIONS_SDK_SUITE=full``) runs every file on every store. Without the network the
cases skip (fail under ``CI=true``).
"""

from __future__ import annotations

import os

import pytest

from tests.sdk_compat.fetch import FetchError, sdk_tree
from tests.sdk_compat.run import CI_CASES, CI_DESELECT, TARGETS, run_sdk_file
from tests.servers import IN_CI, require_server

FULL = os.environ.get("AGENT_SESSIONS_SDK_SUITE", "").lower() == "full"
CASES = [
    (target, name)
    for target, names in TARGETS.items()
    for name in names
    if FULL or (target, name) in CI_CASES
]
SERVERS = {"redis": ("Redis", 6379), "postgres": ("PostgreSQL", 5432), "mariadb": ("MariaDB", 3306)}


@pytest.mark.parametrize(("target", "name"), CASES, ids=[f"{t}-{n[:-3]}" for t, n in CASES])
def test_sdk_session_tests_pass_with_our_classes(target: str, name: str) -> None:
    if target in SERVERS:
        require_server(SERVERS[target][0], "127.0.0.1", SERVERS[target][1])
    try:
        sdk_tree()
    except FetchError as exc:
        if IN_CI:
            pytest.fail(f"the SDK's sdist is needed under CI=true: {exc}", pytrace=False)
        pytest.skip(f"the SDK's sdist could not be fetched (no network?): {exc}")
    result = run_sdk_file(name, target, extra=None if FULL else CI_DESELECT.get((target, name)))
    assert not result.not_swapped, f"classes not swapped in: {result.not_swapped}"
    counts = result.counts()
    assert counts["passed"] > 0, f"no SDK test passed:\n{result.output[-3000:]}"
    failures = result.failures()
    assert not failures, (
        f"{len(failures)} SDK tests failed on {target} ({dict(counts)}):\n"
        + "\n".join(f"{n}  {result.messages.get(n, '')}" for n in failures)
        + f"\n\n{result.output[-6000:]}"
    )
    assert not result.unused_exclusions, (
        f"exclusions naming no collected test (remove them): {result.unused_exclusions}"
    )
