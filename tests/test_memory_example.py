"""examples/memory_agent.py runs offline, from an empty directory, and shows what it claims."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_memory_example_runs_offline(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": ""}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "memory_agent.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for line in [
        "model saw after its first edit: True",
        "read-only refused: True",
        "limit refused: block 'human' would be 310 of 200 characters",
        "recall hit: Hi, I'm Ada. My cat is called Pixel.",
        "upkeep runs: 1",
        "human block v3: 'Name: Ada\\nHas a cat, Pixel'",
    ]:
        assert line in done.stdout.splitlines(), done.stdout
    assert list(tmp_path.iterdir()) == []
