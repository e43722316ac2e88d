"""The command line: demo, show, clear."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_sessions import SQLiteSession
from agent_sessions.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_offline_and_undoes_the_wrong_turn(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = subprocess.run(
        [sys.executable, "-m", "agent_sessions", "demo", "--db", str(db)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "popped assistant: '17 * 3 = 41.'" in out.stdout
    assert "17 * 4 = 68." in out.stdout
    assert out.stdout.rstrip().endswith("The wrong exchange is gone from history: True")
    assert db.exists()


def test_demo_live_without_a_key_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["demo", "--live"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().out


def test_show_and_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"

    async def fill() -> None:
        async with SQLiteSession("cli", str(db)) as s:
            await s.add_items([{"role": "user", "content": f"m{i}"} for i in range(3)])

    asyncio.run(fill())
    url = f"sqlite:///{db}"
    assert main(["show", url, "cli", "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["content"] for line in lines] == ["m1", "m2"]
    assert main(["clear", url, "cli"]) == 0
    capsys.readouterr()
    assert main(["show", url, "cli"]) == 0
    assert capsys.readouterr().out == ""


def test_cli_reports_package_errors_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["show", "ftp://nowhere", "x"]) == 1
    assert "no backend handles the URL scheme 'ftp'" in capsys.readouterr().err


def test_purge_removes_expired_items_of_a_ttl_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_sessions import TTLSession

    db = tmp_path / "ttl.db"
    hour_ago = time.time() - 3600

    async def fill() -> None:
        async with SQLiteSession("old", str(db)) as inner:
            old = TTLSession(inner, ttl=60, clock=lambda: hour_ago)
            await old.add_items([{"role": "user", "content": f"old {i}"} for i in range(3)])
        async with SQLiteSession("fresh", str(db)) as inner:
            await TTLSession(inner, ttl=60).add_items([{"role": "user", "content": "new"}])

    async def stored(session_id: str) -> int:
        async with SQLiteSession(session_id, str(db)) as raw:
            return len(await raw.get_items())

    asyncio.run(fill())
    assert main(["purge", f"sqlite:///{db}", "old", "fresh", "--ttl", "60"]) == 0
    out = capsys.readouterr().out
    assert "old: removed 3 expired item(s)" in out
    assert "fresh: removed 0 expired item(s)" in out
    assert asyncio.run(stored("old")) == 0
    assert asyncio.run(stored("fresh")) == 1


def test_purge_without_a_ttl_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["purge", "memory://", "x"])
    assert "--ttl" in capsys.readouterr().err


def test_options_reach_open_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "custom.db"
    tables = {"sessions_table": "app_sessions", "messages_table": "app_messages"}

    async def fill() -> None:
        async with SQLiteSession(
            "cli", str(db), sessions_table="app_sessions", messages_table="app_messages"
        ) as s:
            await s.add_items([{"role": "user", "content": "in custom tables"}])

    asyncio.run(fill())
    url = f"sqlite:///{db}"
    options = [arg for key, value in tables.items() for arg in ("-o", f"{key}={value}")]
    assert main(["show", url, "cli", *options]) == 0
    assert [json.loads(line)["content"] for line in capsys.readouterr().out.splitlines()] == [
        "in custom tables"
    ]
    assert main(["show", url, "cli"]) == 0  # the default tables hold nothing for it
    assert capsys.readouterr().out == ""
    assert main(["clear", url, "cli", *options]) == 0
    capsys.readouterr()
    assert main(["show", url, "cli", *options]) == 0
    assert capsys.readouterr().out == ""
    with pytest.raises(SystemExit) as exit_info:
        main(["show", url, "cli", "-o", "no-equals-sign"])
    assert exit_info.value.code == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["show", url, "cli", "-o", "no_such_option=1"]) == 1
    assert "no_such_option" in capsys.readouterr().err
