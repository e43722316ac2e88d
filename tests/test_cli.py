"""The command line: every command against SQLite, Redis and PostgreSQL, plus the demo."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_sessions import SQLiteSession
from agent_sessions.cli import main
from tests.servers import POSTGRES_URL, REDIS_URL, RUN, drop_redis_keys, require_server

ROOT = Path(__file__).resolve().parent.parent


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


def _lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class Target:
    """A store for the CLI: its URL and the -o options that isolate this test run."""

    def __init__(self, name: str, url: str, options: dict[str, str]) -> None:
        self.name = name
        self.url = url
        self.options = options

    @property
    def args(self) -> list[str]:
        return [arg for key, value in self.options.items() for arg in ("-o", f"{key}={value}")]

    async def open(self, session_id: str) -> Any:
        from agent_sessions import open_session

        return await open_session(self.url, session_id, **self.options)


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        yield Target("sqlite", f"sqlite:///{tmp_path / 'cli.db'}", {})
    elif request.param == "redis":
        require_server("Redis", "127.0.0.1", 6379)
        prefix = f"cli{RUN}{uuid.uuid4().hex[:6]}"
        yield Target("redis", REDIS_URL, {"key_prefix": prefix})
        asyncio.run(drop_redis_keys(REDIS_URL, f"{prefix}*"))
    else:
        require_server("PostgreSQL", "127.0.0.1", 5432)
        prefix = request.getfixturevalue("sql_prefix")
        yield Target("postgres", POSTGRES_URL, {"table_prefix": prefix})


def _fill(target: Target, sessions: dict[str, int], branch: str | None = None) -> None:
    from agent_sessions import BranchingSession

    async def go() -> None:
        for sid, n in sessions.items():
            session = await target.open(sid)
            try:
                if sid == branch:
                    branching = BranchingSession(session)
                    await branching.add_items([_msg(f"{sid} {i}") for i in range(n)])
                    await branching.create_branch_from_turn(1)
                else:
                    await session.add_items([_msg(f"{sid} {i}") for i in range(n)])
            finally:
                await session.close()

    asyncio.run(go())


def test_every_command_on_each_store(
    target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, o = target.url, target.args
    _fill(target, {"alice": 3, "bob": 2, "carol": 1}, branch="alice")

    assert main(["list", url, "--json", *o]) == 0
    listed = _lines(capsys.readouterr().out)
    assert [(r["session_id"], r["item_count"]) for r in listed] == [
        ("alice", 3), ("bob", 2), ("carol", 1)
    ]
    assert all(r["updated_at"] for r in listed)
    assert main(["list", url, "--prefix", "b", *o]) == 0
    out = capsys.readouterr()
    assert "bob" in out.out and "alice" not in out.out and "1 session(s)" in out.err
    assert main(["list", url, "--updated-before", "1h", "--json", *o]) == 0
    assert capsys.readouterr().out == ""

    assert main(["show", url, "bob", *o]) == 0
    assert _lines(capsys.readouterr().out) == [_msg("bob 0"), _msg("bob 1")]
    assert main(["show", url, "bob", "--limit", "1", *o]) == 0
    assert _lines(capsys.readouterr().out) == [_msg("bob 1")]

    assert main(["stats", url, "--json", *o]) == 0
    totals = json.loads(capsys.readouterr().out)
    assert (totals["sessions"], totals["items"]) == (3, 6)
    assert totals["side_stores"] >= 1  # alice's branch log

    export = tmp_path / "export.jsonl"
    assert main(["export", url, "-O", str(export), *o]) == 0
    assert "exported 3 session(s)" in capsys.readouterr().err
    records = _lines(export.read_text())
    assert records[0] == {"format": "agent-sessions-export/1"}
    assert [r["session_id"] for r in records[1:4]] == ["alice"] * 3

    assert main(["delete", url, "alice", "--yes", "--json", *o]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 1}
    assert main(["stats", url, "--json", *o]) == 0
    totals = json.loads(capsys.readouterr().out)
    assert (totals["sessions"], totals["side_stores"]) == (2, 0)  # the erase took the family

    assert main(["import", url, str(export), "--json", *o]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["sessions"], report["skipped"]) == (3, 2)  # bob and carol were there
    assert report["side_stores"] >= 1
    assert main(["show", url, "alice", *o]) == 0
    assert [i["content"] for i in _lines(capsys.readouterr().out)] == [
        "alice 0", "alice 1", "alice 2"
    ]

    copy_db = tmp_path / "copy.db"
    src_o = [arg for kv in o[1::2] for arg in ("--src-option", kv)]
    dst_o = [arg for kv in o[1::2] for arg in ("--dst-option", kv)]
    assert main(["copy", url, f"sqlite:///{copy_db}", "--json", *src_o]) == 0
    copied = json.loads(capsys.readouterr().out)
    assert (copied["sessions"], copied["items"] >= 6) == (3, True)
    assert main(["list", f"sqlite:///{copy_db}", "--json"]) == 0
    assert [r["item_count"] for r in _lines(capsys.readouterr().out)] == [3, 2, 1]
    # and back: everything is there already, so the copy verifies and skips it all
    assert main(["copy", f"sqlite:///{copy_db}", url, "--json", *dst_o]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["skipped"], again["items"]) == (copied["sessions"] + copied["side_stores"], 0)

    assert main(["clear", url, "nobody", "--yes", *o]) == 1
    assert "no session 'nobody'" in capsys.readouterr().err
    assert main(["clear", url, "carol", "--yes", "--json", *o]) == 0
    assert json.loads(capsys.readouterr().out) == {"cleared": "carol"}
    # SQLite (the SDK's schema) drops a cleared session's row; the others keep its counter.
    assert main(["show", url, "carol", *o]) == (1 if target.name == "sqlite" else 0)
    assert capsys.readouterr().out == ""
    assert main(["delete", url, "--prefix", "b", *o]) == 1  # no terminal, no --yes
    assert "pass --yes" in capsys.readouterr().err


def test_show_creates_nothing_and_fails_on_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "typo.db"
    assert main(["show", f"sqlite:///{typo}", "x"]) == 1
    assert "no session store" in capsys.readouterr().err
    assert not typo.exists()
    db = tmp_path / "app.db"
    _fill(Target("sqlite", f"sqlite:///{db}", {}), {"x": 1})
    for args in (["-o", "sessions_table=typo_s"], ["-o", "messages_table=typo_m"]):
        assert main(["show", f"sqlite:///{db}", "x", *args]) == 1
        assert "no session store" in capsys.readouterr().err
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not tables & {"typo_s", "typo_m"}
    assert main(["show", f"sqlite:///{db}", "nobody"]) == 1
    assert "no session 'nobody'" in capsys.readouterr().err
    assert main(["list", f"sqlite+aiosqlite:///{tmp_path / 'typo2.db'}"]) == 1
    assert not (tmp_path / "typo2.db").exists()


def test_show_on_servers_creates_no_tables_or_keys(capsys: pytest.CaptureFixture[str]) -> None:
    require_server("PostgreSQL", "127.0.0.1", 5432)
    require_server("Redis", "127.0.0.1", 6379)
    run = uuid.uuid4().hex[:8]
    assert main(["show", POSTGRES_URL, "x", "-o", f"table_prefix=typo{run}_"]) == 1
    assert "no session store" in capsys.readouterr().err

    async def pg_tables() -> list[str]:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(POSTGRES_URL)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text("SELECT tablename FROM pg_tables WHERE tablename LIKE :p"),
                    {"p": f"typo{run}%"},
                )
                return [r[0] for r in rows]
        finally:
            await engine.dispose()

    assert asyncio.run(pg_tables()) == []
    assert main(["show", REDIS_URL, "x", "-o", f"key_prefix=typo{run}"]) == 1
    assert "no session 'x'" in capsys.readouterr().err

    async def redis_keys() -> list[Any]:
        from redis.asyncio import Redis

        client = Redis.from_url(REDIS_URL)
        try:
            return [k async for k in client.scan_iter(match=f"typo{run}*")]
        finally:
            await client.aclose()

    assert asyncio.run(redis_keys()) == []


def test_show_unwraps_ttl_and_with_a_key_encrypted_envelopes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cryptography.fernet import Fernet

    from agent_sessions import EncryptedSession, TTLSession

    key = Fernet.generate_key().decode()
    db = tmp_path / "enc.db"

    async def fill() -> None:
        async with SQLiteSession("secret", str(db)) as raw:
            session = TTLSession(EncryptedSession(raw, encryption_key=key), ttl=3600)
            await session.add_items([_msg("classified"), _msg("also")])
        async with SQLiteSession("ttl-only", str(db)) as raw:
            await TTLSession(raw, ttl=3600).add_items([_msg("plain")])

    asyncio.run(fill())
    url = f"sqlite:///{db}"
    assert main(["show", url, "ttl-only"]) == 0
    assert _lines(capsys.readouterr().out) == [_msg("plain")]
    assert main(["show", url, "secret"]) == 0
    shown = _lines(capsys.readouterr().out)
    assert [i["type"] for i in shown] == ["agent_sessions.enc"] * 2
    assert "classified" not in json.dumps(shown)
    assert main(["show", url, "secret", "--decrypt", "--key", key]) == 0
    assert _lines(capsys.readouterr().out) == [_msg("classified"), _msg("also")]
    wrong = Fernet.generate_key().decode()
    assert main(["show", url, "secret", "--decrypt", "--key", wrong]) == 1
    assert "classified" not in capsys.readouterr().out
    assert main(["show", url, "secret", "--decrypt"]) == 2
    assert "--key" in capsys.readouterr().err


def test_copy_resumes_a_partial_destination_and_refuses_a_conflict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = f"sqlite:///{tmp_path / 'src.db'}", f"sqlite:///{tmp_path / 'dst.db'}"
    _fill(Target("src", src, {}), {"long": 7, "other": 2})
    _fill(Target("dst", dst, {}), {"long": 3})  # items 0..2, as a copy that stopped leaves them
    assert main(["copy", src, dst, "--batch", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["sessions"], report["items"]) == (2, 4 + 2)
    assert main(["show", dst, "long"]) == 0
    assert [i["content"] for i in _lines(capsys.readouterr().out)] == [
        f"long {i}" for i in range(7)
    ]
    _fill(Target("src", src, {}), {"diverged": 2})
    asyncio.run(_add(tmp_path / "dst.db", "diverged", [_msg("something else")]))
    assert main(["copy", src, dst, "diverged"]) == 1
    assert "--replace" in capsys.readouterr().err
    assert main(["copy", src, dst, "diverged", "--replace", "--yes"]) == 0
    capsys.readouterr()
    assert main(["show", dst, "diverged"]) == 0
    assert [i["content"] for i in _lines(capsys.readouterr().out)] == ["diverged 0", "diverged 1"]


async def _add(db: Path, sid: str, items: list[Any]) -> None:
    async with SQLiteSession(sid, str(db)) as s:
        await s.add_items(items)


def test_import_rejects_what_is_not_an_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user"}\n')
    db = tmp_path / "i.db"
    assert main(["import", f"sqlite:///{db}", str(bad)]) == 1
    assert "not an agent-sessions export" in capsys.readouterr().err
    assert main(["import", f"sqlite:///{db}", str(tmp_path / "missing.jsonl")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_purge_removes_expired_items_and_erases_emptied_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_sessions import TTLSession

    db = tmp_path / "ttl.db"
    hour_ago = time.time() - 3600

    async def fill() -> None:
        async with SQLiteSession("old", str(db)) as inner:
            old = TTLSession(inner, ttl=60, clock=lambda: hour_ago)
            await old.add_items([_msg(f"old {i}") for i in range(3)])
        async with SQLiteSession("fresh", str(db)) as inner:
            await TTLSession(inner, ttl=60).add_items([_msg("new")])

    asyncio.run(fill())
    url = f"sqlite:///{db}"
    assert main(["purge", url, "--ttl", "60", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "sessions": 2, "removed": 3, "by_session": {"old": 3}
    }
    assert main(["list", url, "--json"]) == 0
    assert [r["session_id"] for r in _lines(capsys.readouterr().out)] == ["fresh"]
    assert main(["purge", url, "fresh", "--ttl", "60", "--yes"]) == 0
    assert "fresh: removed 0 expired item(s)" in capsys.readouterr().out
    assert main(["purge", url, "--yes"]) == 2
    assert "--ttl" in capsys.readouterr().err


def test_options_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "custom.db"

    async def fill() -> None:
        async with SQLiteSession(
            "cli", str(db), sessions_table="app_sessions", messages_table="app_messages"
        ) as s:
            await s.add_items([_msg("in custom tables")])

    asyncio.run(fill())
    url = f"sqlite:///{db}"
    options = ["-o", "sessions_table=app_sessions", "-o", "messages_table=app_messages"]
    assert main(["show", url, "cli", *options]) == 0
    assert _lines(capsys.readouterr().out) == [_msg("in custom tables")]
    assert main(["show", url, "cli", "-o", "no-equals-sign"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["show", url, "cli", *options, "-o", "no_such_option=1"]) == 1
    assert "no_such_option" in capsys.readouterr().err
    assert main(["show", "ftp://nowhere", "x"]) == 1
    assert "no backend handles the URL scheme 'ftp'" in capsys.readouterr().err
    assert main(["list", url, "--updated-before", "yesterday"]) == 2
    assert "duration" in capsys.readouterr().err
    assert main(["delete", url]) == 2
    assert main(["no-such-command"]) == 2
    assert main(["export", url, *options, "-O", str(tmp_path / "no" / "dir.jsonl")]) == 1
    assert "cannot write" in capsys.readouterr().err
    assert main(["show", url, "", *options]) == 1
    assert "must not be empty" in capsys.readouterr().err


def test_unreachable_or_wrong_servers_fail_with_a_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "redis://127.0.0.1:1/0", "-o", "timeout=2"]) == 1
    assert "check that it is running" in capsys.readouterr().err
    require_server("PostgreSQL", "127.0.0.1", 5432)
    wrong_db = POSTGRES_URL.rsplit("/", 1)[0] + "/no_such_db_for_cli"
    assert main(["list", wrong_db]) == 1
    err = capsys.readouterr().err
    assert "cannot connect to the database" in err and "no_such_db_for_cli" in err


def test_help_and_version_do_not_import_the_sdk() -> None:
    code = (
        "import sys; from agent_sessions.cli import main; rc = main(['--help']); "
        "rc += main(['--version']); print(rc, 'agents' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "copy" in out.stdout and "agent-sessions 0." in out.stdout
    assert out.stdout.rstrip().endswith("0 False")


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
