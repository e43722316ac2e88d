"""The command line's rough edges a newcomer met (issue 41), one test each."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_sessions.cli import main
from tests.test_cli import ROOT, Target, _fill


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent_sessions", *args]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.parametrize("command", ["export", "show"])
def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path, command: str) -> None:
    url = f"sqlite:///{tmp_path / 'big.db'}"
    _fill(Target("sqlite", url, {}), {"big": 3000})  # far more than a pipe buffer holds
    args = [url] if command == "export" else [url, "big"]
    writer = subprocess.Popen(
        _cli(command, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    assert writer.stdout is not None and writer.stderr is not None
    head = subprocess.run(["head", "-1"], stdin=writer.stdout, capture_output=True, timeout=60)
    writer.stdout.close()  # only head holds the read end now: it exits, the pipe closes
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=60) in (0, 141) and head.returncode == 0
    assert len(head.stdout.splitlines()) == 1
    assert "Broken pipe" not in err and "Exception" not in err, err
    assert command == "export" or err == ""  # export prints its summary only when done


def _help(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "300")  # no wrapping: a phrase stays on one line
    assert main([*args, "--help"]) == 0
    return capsys.readouterr().out


def test_help_says_what_delete_ids_and_show_decrypt_take(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    delete = _help(monkeypatch, capsys, "delete")
    assert "default: all" not in delete
    assert "session ids (or select them with --prefix, --all or --user)" in delete
    assert main(["delete", "sqlite:///x.db"]) == 2  # and indeed none is the default
    show = _help(monkeypatch, capsys, "show")
    assert "needs --key)" not in show
    assert "the key from --key-file, AGENT_SESSIONS_KEY, AGENT_SESSIONS_KEY_FILE or --key" in show


def test_help_shows_flags_without_a_value_placeholder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    listing = _help(monkeypatch, capsys, "list")
    assert "<bool>" not in listing
    assert "<int range>" in listing  # options that take a value still show its type
    assert "--json" in listing


def test_demo_removes_its_temporary_file_unless_kept(tmp_path: Path) -> None:
    env = _env(TMPDIR=str(tmp_path))
    run = subprocess.run(_cli("demo"), capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Removed the temporary SQLite file" in run.stdout
    assert list(tmp_path.iterdir()) == []
    kept = subprocess.run(
        _cli("demo", "--keep"), capture_output=True, text=True, env=env, timeout=120
    )
    assert kept.returncode == 0, kept.stderr
    [folder] = tmp_path.iterdir()
    assert f"Kept the SQLite file in {folder}" in kept.stdout
    assert (folder / "demo.db").exists()


def test_a_missing_extra_reads_the_same_for_every_scheme() -> None:
    from agent_sessions.core.extras import missing

    ours = missing("the redis:// backend", "redis", ModuleNotFoundError(name="redis"))
    sdks = missing(
        "the sdk+redis:// backend",
        "redis",
        ImportError("RedisSession requires the 'redis' extra. Install it with: pip install x"),
    )
    assert str(ours).partition(" needs ")[2] == str(sdks).partition(" needs ")[2]
    assert str(sdks) == (
        "the sdk+redis:// backend needs the package 'redis', which is not installed; install "
        'it with: pip install "agent-sessions-store[redis]"'
    )


def test_stats_counts_branches_by_kind_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_sessions import BranchingSession, open_session

    url = f"sqlite:///{tmp_path / 'b.db'}"

    async def branches() -> None:
        async with await open_session(url, "chat") as session:
            branching = BranchingSession(session)
            await branching.add_items([{"role": "user", "content": f"q{i}"} for i in range(3)])
            for _ in range(3):
                await branching.create_branch_from_turn(1)
                await branching.add_items([{"role": "user", "content": "other"}])

    asyncio.run(branches())
    assert main(["stats", url, "--json"]) == 0
    kinds = json.loads(capsys.readouterr().out)["side_stores_by_kind"]
    assert not any(kind.startswith("seg.") for kind in kinds)
    assert kinds["branch segments"] == {"stores": 3, "items": 3}
    assert main(["stats", url]) == 0
    table = capsys.readouterr().out
    assert "3 stores, 3 items" in table and "1 store, " in table and "items)" not in table


def test_errors_name_no_internal_id_and_end_without_an_exception_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", "redis://127.0.0.1:1/0"]) == 1
    err = capsys.readouterr().err
    assert "agent-sessions-cli" not in err and "check that it is running" in err
    assert main(["list", f"sqlite:///{tmp_path / 'x.db'}", "-o", "foo=1"]) == 1
    err = capsys.readouterr().err.strip()
    assert "unknown option(s) 'foo'. Valid options: " in err
    assert not err.endswith("(TypeError)")


def test_a_self_copy_of_a_sqlite_file_hints_at_another_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    assert main(["copy", url, url]) == 1
    err = capsys.readouterr().err
    assert "Name another file" in err and "key_prefix" not in err


def test_list_on_a_file_that_is_not_sqlite_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    assert main(["list", f"sqlite:///{notes}"]) == 1
    assert f"{notes} is not a SQLite database file" in capsys.readouterr().err
    assert notes.read_text() == "hello\n"


def test_an_import_summary_counts_what_it_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = f"sqlite:///{tmp_path / 's.db'}", f"sqlite:///{tmp_path / 'd.db'}"
    _fill(Target("s", src, {}), {"a": 2, "b": 3, "c": 4})
    export = tmp_path / "e.jsonl"
    assert main(["export", src, "-O", str(export), "-q"]) == 0
    assert main(["import", dst, str(export), "-q"]) == 0
    capsys.readouterr()
    assert main(["delete", dst, "b", "--yes"]) == 0
    assert main(["import", dst, str(export), "-q"]) == 0
    out = capsys.readouterr().out.splitlines()[-1]
    assert out == (
        "imported 1 session(s) and 0 side store(s): 3 item(s) written; 2 session(s) and side "
        "store(s) already complete"
    )
