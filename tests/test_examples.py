"""Every script in examples/ runs offline and prints what it claims to show.

Each example runs as its own process (as a reader would run it), from an empty working
directory, with the worktree's package on PYTHONPATH; it must exit 0, print its expected line
and leave no file behind in the working directory.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.servers import POSTGRES_URL, REDIS_URL, RUN, require_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# (script, arguments, a line its output must contain, whether it may leave files in its cwd)
CASES: list[tuple[str, list[str], str, bool]] = [
    ("undo_and_reask.py", [], "['user', 'assistant']", False),
    ("open_by_url.py", [], "[{'role': 'user', 'content': 'hello'}]", False),
    # A file URL the reader chose: the script keeps that database (the session is cleared).
    ("open_by_url.py", ["sqlite:///url.db"], "[{'role': 'user', 'content': 'hello'}]", True),
    ("branching_experiment.py", [], "  2. Which river flows through it?", False),
    ("encrypted_ttl.py", [], "secret visible in the store: False", False),
    (
        "compaction.py",
        [],
        "archive search 'sardines': ['Try the grilled sardines in Alfama.']",
        False,
    ),
]

# More lines per script that make the output's claim specific.
MORE_LINES: dict[str, list[str]] = {
    "undo_and_reask.py": ["2 + 3 = 5"],
    "branching_experiment.py": [
        "answer on alt: The Seine.",
        "questions the model saw on alt: "
        "['What is the capital of France?', 'Which river flows through it?']",
        "  3. Which museum should I visit?",
        "usage main: {'requests': 3, 'input_tokens': 120, 'output_tokens': 15, "
        "'total_tokens': 135, 'total_turns': 3}",
        "usage alt: {'requests': 1, 'input_tokens': 40, 'output_tokens': 4, "
        "'total_tokens': 44, 'total_turns': 1}",
    ],
    "encrypted_ttl.py": [
        "answer: It ends in 1111.",
        "decrypted first item: Remember: my card number is 4111 1111 1111 1111",
    ],
    "compaction.py": [
        "items before compaction: 8",
        "compacted view (3 items):",
        "Summary of the earlier conversation (older messages were compacted):",
        "archived originals (6 items, still stored):",
    ],
}


# Substrings some line must contain (where the whole line varies from run to run).
FRAGMENTS: dict[str, list[str]] = {
    "encrypted_ttl.py": [
        'stored first item: {"type": "agent_sessions.enc", "v": 1, "kid": "default", "t": ',
    ],
}


def run_example(script: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def check(script: str, args: list[str], expected: str, may_leave_files: bool, cwd: Path) -> None:
    proc = run_example(script, args, cwd)
    assert proc.returncode == 0, f"{script} {args} failed:\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    for line in [expected, *MORE_LINES.get(script, [])]:
        assert line in lines, f"{script} {args} did not print {line!r}:\n{proc.stdout}"
    for fragment in FRAGMENTS.get(script, []):
        assert any(fragment in line for line in lines), f"{script}: no {fragment!r}"
    if not may_leave_files:
        assert list(cwd.iterdir()) == [], f"{script} left files behind"


@pytest.mark.parametrize(
    ("script", "args", "expected", "may_leave_files"),
    CASES,
    ids=[f"{case[0]}{'-' + '-'.join(case[1]) if case[1] else ''}" for case in CASES],
)
def test_example_runs_and_prints(
    script: str, args: list[str], expected: str, may_leave_files: bool, tmp_path: Path
) -> None:
    check(script, args, expected, may_leave_files, tmp_path)


@pytest.mark.server
def test_open_by_url_on_redis_leaves_no_key(tmp_path: Path) -> None:
    from redis import Redis

    where = urlsplit(REDIS_URL)
    require_server("Redis", where.hostname or "127.0.0.1", where.port or 6379)
    sid = f"url-example-{RUN}-{uuid.uuid4().hex[:6]}"
    check(
        "open_by_url.py",
        [REDIS_URL, sid],
        "[{'role': 'user', 'content': 'hello'}]",
        False,
        tmp_path,
    )
    with Redis.from_url(REDIS_URL) as client:
        assert list(client.scan_iter(f"*{sid}*")) == []


@pytest.mark.server
def test_open_by_url_on_postgresql_leaves_no_row(tmp_path: Path, sql_prefix: str) -> None:
    require_server("PostgreSQL", "127.0.0.1", 5432)
    args = [POSTGRES_URL, f"url-example-{RUN}", f"table_prefix={sql_prefix}"]
    check("open_by_url.py", args, "[{'role': 'user', 'content': 'hello'}]", False, tmp_path)

    async def rows() -> dict[str, int]:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(POSTGRES_URL)
        try:
            async with engine.connect() as conn:
                found = await conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE tablename LIKE :p"),
                    {"p": f"{sql_prefix}%"},
                )
                names = list(found.scalars())
                count = 'SELECT count(*) FROM "{}"'
                return {n: (await conn.execute(text(count.format(n)))).scalar_one() for n in names}
        finally:
            await engine.dispose()

    counts = asyncio.run(rows())
    schema = counts.pop(f"{sql_prefix}schema")  # the layout's version, not a session's
    assert schema == 1 and counts and not any(counts.values()), counts  # no session row


TESTED_IN_OWN_MODULE = {
    "fastapi_app.py": ROOT / "tests" / "test_fastapi_example.py",
    "fastapi_tenants.py": ROOT / "tests" / "test_fastapi_example.py",
    "memory_agent.py": ROOT / "tests" / "test_memory_example.py",
}
"""Examples that need more than a run and its output (a web app), with the module testing each."""


def test_every_example_is_covered() -> None:
    scripts = {path.name for path in EXAMPLES.glob("*.py")}
    for script, module in TESTED_IN_OWN_MODULE.items():
        source = module.read_text(encoding="utf-8")
        assert f'"{script}"' in source, f"{module} does not test {script}"
    covered = {case[0] for case in CASES} | set(TESTED_IN_OWN_MODULE)
    assert scripts == covered, f"examples without a test case: {sorted(scripts - covered)}"
