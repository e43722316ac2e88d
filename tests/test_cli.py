"""The command line: every command against SQLite, Redis and PostgreSQL, plus the demo."""

from __future__ import annotations

import asyncio
import io
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
        ("alice", 3),
        ("bob", 2),
        ("carol", 1),
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
    assert records[0] == {"format": "agent-sessions-export/2"}
    assert [r["session_id"] for r in records[1:5]] == ["alice"] * 4  # its times, its items

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
        "alice 0",
        "alice 1",
        "alice 2",
    ]

    # sqlite+aiosqlite: numbers per session, as every store but the SDK's SQLite layout
    copy_url = f"sqlite+aiosqlite:///{tmp_path / 'copy.db'}"
    src_o = [arg for kv in o[1::2] for arg in ("--src-option", kv)]
    dst_o = [arg for kv in o[1::2] for arg in ("--dst-option", kv)]
    assert main(["copy", url, copy_url, "--json", *src_o]) == 0
    copied = json.loads(capsys.readouterr().out)
    assert (copied["sessions"], copied["items"] >= 6) == (3, True)
    assert main(["list", copy_url, "--json"]) == 0
    assert [r["item_count"] for r in _lines(capsys.readouterr().out)] == [3, 2, 1]
    # and back: everything is there already, so the copy verifies and skips it all
    assert main(["copy", copy_url, url, "--json", *dst_o]) == 0
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
    assert (report["sessions"], report["items"]) == (2, 7 + 2)  # "long" written again whole
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


def test_copy_into_a_renumbering_store_refuses_side_stores_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_sessions import AdvancedSession

    async def fill() -> None:
        async with SQLiteSession("talk", str(tmp_path / "src.db")) as raw:
            session = AdvancedSession(raw)
            await session.add_items([_msg("q0"), _msg("q1")])
            await session.create_branch_from_turn(2, "retry")

    asyncio.run(fill())
    src, dst = f"sqlite:///{tmp_path / 'src.db'}", f"sdk+sqlite+aiosqlite:///{tmp_path / 'sdk.db'}"
    assert main(["copy", src, dst]) == 1
    assert "--renumber" in capsys.readouterr().err
    assert main(["copy", src, dst, "--renumber", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["sessions"], report["side_stores"], report["renumbered"]) == (1, 0, 1)
    assert report["side_stores_left"] >= 1


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
    report = json.loads(capsys.readouterr().out)
    assert (report["sessions"], report["removed"], report["by_session"]) == (2, 3, {"old": 3})
    assert report["erased"] == ["old"]
    assert main(["list", url, "--json"]) == 0
    assert [r["session_id"] for r in _lines(capsys.readouterr().out)] == ["fresh"]
    assert main(["purge", url, "fresh", "--ttl", "60", "--yes"]) == 0
    assert "fresh: removed 0 expired item(s)" in capsys.readouterr().out
    assert main(["purge", url, "--yes"]) == 2
    assert "--ttl" in capsys.readouterr().err


def test_purge_dry_run_promises_no_erase_a_store_without_catalog_cannot_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that cannot list its sessions cannot erase them: the purge leaves an emptied
    session in place, so neither its dry run nor its question may say it will be erased."""
    from agent_sessions import TTLSession
    from agent_sessions.backends.memory import InMemorySession
    from agent_sessions.core import registry

    class Unlisted:
        """An in-memory session without ``catalog_store`` (a store that cannot list)."""

        def __init__(self, inner: InMemorySession) -> None:
            self.inner, self.capabilities = inner, inner.capabilities

        def __getattr__(self, name: str) -> Any:
            if name == "catalog_store":
                raise AttributeError(name)
            return getattr(self.inner, name)

        def sibling(self, session_id: str) -> Unlisted:
            return Unlisted(self.inner.sibling(session_id))

    def opener(url: str, session_id: str, **options: Any) -> Unlisted:
        return Unlisted(InMemorySession(session_id, **options))

    monkeypatch.setitem(registry._SCHEMES, "unlisted", registry._Entry(opener, None))
    sid = f"unlisted-{uuid.uuid4().hex[:8]}"
    hour_ago = time.time() - 3600

    async def fill() -> None:
        async with InMemorySession(sid) as inner:
            await TTLSession(inner, item_ttl=60, clock=lambda: hour_ago).add_items([_msg("old")])

    asyncio.run(fill())
    try:
        args = ["purge", "unlisted://", sid, "--item-ttl", "60"]
        assert main([*args, "--dry-run"]) == 0
        dry = capsys.readouterr().out
        assert f"{sid}: would remove 1 expired item(s)" in dry
        assert "erased" not in dry
        assert main([*args, "--json"]) == 1  # no terminal: the question is the error
        assert "erase" not in capsys.readouterr().err
        assert main([*args, "--yes", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert (report["removed"], report["erased"]) == (1, [])
    finally:
        asyncio.run(InMemorySession(sid).clear_session())


@pytest.fixture(params=["sqlite", "redis"])
def ttl_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        yield Target("sqlite", f"sqlite:///{tmp_path / 'purge.db'}", {})
    else:
        require_server("Redis", "127.0.0.1", 6379)
        run = f"clipurge{RUN}{uuid.uuid4().hex[:6]}"
        yield Target("redis", REDIS_URL, {"key_prefix": run})
        asyncio.run(drop_redis_keys(REDIS_URL, f"{run}*"))


def test_purge_touches_only_sessions_written_through_ttl(
    ttl_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    from cryptography.fernet import Fernet

    from agent_sessions import AdvancedSession, CompactionSession, EncryptedSession, TTLSession

    key = Fernet.generate_key().decode()
    hour_ago = time.time() - 3600
    turn = [_msg("q"), {"role": "assistant", "content": "a"}]

    async def fill() -> None:
        async with await ttl_target.open("plain") as s:
            await s.add_items(turn * 3)
        async with await ttl_target.open("advanced") as s:
            advanced = AdvancedSession(s)
            await advanced.add_items(turn * 3)
            await advanced.create_branch_from_turn(2)
        async with await ttl_target.open("compacted") as s:
            compaction = CompactionSession(s, keep_last=2)
            await compaction.add_items(turn * 4)
            await compaction.compact()
        async with await ttl_target.open("secret") as s:
            await EncryptedSession(s, encryption_key=key).add_items(turn * 2)
        async with await ttl_target.open("expired") as s:
            await TTLSession(s, ttl=60, clock=lambda: hour_ago).add_items(turn)
        async with await ttl_target.open("ttl-over-encrypted") as s:
            encrypted = EncryptedSession(s, encryption_key=key)
            await TTLSession(encrypted, ttl=60, clock=lambda: hour_ago).add_items(turn)

    asyncio.run(fill())
    url, o = ttl_target.url, ttl_target.args
    assert main(["stats", url, "--json", *o]) == 0
    before = json.loads(capsys.readouterr().out)

    assert main(["purge", url, "--ttl", "60", "--dry-run", *o]) == 0
    out = capsys.readouterr().out
    assert "expired: would remove 2 expired item(s) (left empty" in out
    assert "would remove 2 item(s) from 1 TTL session(s); 5 session(s) not written" in out
    assert "plain: skipped, its items are not TTLSession envelopes" in out
    assert "ttl-over-encrypted: skipped, its items are encrypted" in out
    assert main(["stats", url, "--json", *o]) == 0
    assert json.loads(capsys.readouterr().out) == before  # the dry run changed nothing

    assert main(["purge", url, "--ttl", "60", *o]) == 1  # no terminal: the question is the error
    err = capsys.readouterr().err
    assert "Remove 2 expired item(s) from 1 TTL session(s) ('expired')" in err
    assert "5 session(s) not written through TTLSession are skipped" in err

    assert main(["purge", url, "--ttl", "60", "--yes", "--json", *o]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["removed"], report["erased"], report["skipped"]) == (2, ["expired"], 5)
    assert report["skipped_ids"] == [
        "advanced",
        "compacted",
        "plain",
        "secret",
        "ttl-over-encrypted",
    ]
    assert main(["stats", url, "--json", *o]) == 0
    after = json.loads(capsys.readouterr().out)
    assert (after["sessions"], after["items"]) == (5, before["items"] - 2)
    # only the family of "expired" went (its lifecycle record and its family registry)
    assert after["side_stores"] == before["side_stores"] - 2
    assert main(["purge", url, "plain", "nobody", "--ttl", "60", "--yes", *o]) == 1
    assert "no session 'nobody'" in capsys.readouterr().err


def test_erase_of_unknown_ids_and_copy_onto_itself_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "app.db"
    url = f"sqlite:///{db}"
    _fill(Target("sqlite", url, {}), {"alice": 2, "bob": 1})
    assert main(["delete", url, "bob", "no-such-id", "--yes"]) == 1
    assert "no session 'no-such-id'" in capsys.readouterr().err
    assert main(["list", url, "--json"]) == 0
    assert len(_lines(capsys.readouterr().out)) == 2  # bob was not erased either

    other = f"sqlite:///{tmp_path / '.' / 'app.db'}"  # the same file, spelled otherwise
    assert main(["copy", url, other, "--replace", "--yes"]) == 1
    assert "both the source and the destination" in capsys.readouterr().err
    dst = f"sqlite:///{tmp_path / 'dst.db'}"
    assert main(["copy", url, dst]) == 0
    assert "copied 2 session(s)" in capsys.readouterr().out
    assert main(["copy", url, dst]) == 0
    assert capsys.readouterr().out.startswith(
        "nothing copied: all 2 session(s) and side store(s) were already complete"
    )


def test_no_password_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sql_prefix: str
) -> None:
    export = tmp_path / "e.jsonl"
    export.write_text('{"format": "agent-sessions-export/1"}\n')
    pg = "postgresql://app:S3CRET-PW@127.0.0.1:1/test"
    assert main(["import", pg, str(export), "--replace"]) == 1  # no terminal, no --yes
    err = capsys.readouterr().err
    assert "postgresql://app:***@127.0.0.1:1/test" in err and "S3CRET" not in err
    assert main(["copy", f"sqlite:///{tmp_path / 'x.db'}", pg, "--replace"]) == 1
    err = capsys.readouterr().err
    assert "app:***@" in err and "S3CRET" not in err
    require_server("PostgreSQL", "127.0.0.1", 5432)  # trust auth: any password connects
    run = sql_prefix
    with_pw = POSTGRES_URL.replace("://postgres@", "://postgres:S3CRET-PW@")
    assert "S3CRET-PW" in with_pw
    _fill(Target("pg", with_pw, {"table_prefix": run}), {"x": 1})
    for args in (["delete", with_pw, "x"], ["copy", with_pw, with_pw, "--replace"]):
        assert main([*args, "-o", f"table_prefix={run}"]) == 1  # no terminal, no --yes
        err = capsys.readouterr().err
        assert "postgres:***@" in err and "S3CRET" not in err
    require_server("Redis", "127.0.0.1", 6379)
    wrong = REDIS_URL.replace("redis://", "redis://nobody:S3CRET-PW@")
    for args in (["list", wrong], ["delete", wrong, "x", "--yes"], ["stats", wrong]):
        assert main(args) == 1
        err = capsys.readouterr().err
        assert "authentication required/failed: check the user and password in the URL" in err
        assert "S3CRET" not in err and "write" not in err and "running" not in err


@pytest.mark.parametrize(
    ("url", "driver", "masked"),
    [
        pytest.param(  # a 1-character password that is also a word of the message
            "postgresql://app:a@db.example/a",
            "postgresql+asyncpg://app:a@db.example:5432/a: database 'a' is a problem; "
            "conninfo host=db.example password=a dbname=a; {'user': 'app', 'password': 'a'}",
            "postgresql+asyncpg://app:***@db.example:5432/a: database 'a' is a problem; "
            "conninfo host=db.example password=*** dbname=a; {'user': 'app', 'password': '***'}",
            id="one-character",
        ),
        pytest.param(  # a 2-character one, percent-encoded in the URL, in the driver decoded
            "redis://:x%40@cache:6379/0",
            'Error connecting to redis://:x@@cache:6379: "PASSWORD": "x@", pwd=x@, x@ is x@',
            'Error connecting to redis://:***@cache:6379: "PASSWORD": "***", pwd=***, x@ is x@',
            id="two-characters-encoded",
        ),
        pytest.param(  # a password that is also the database name and a user's name
            "mysql://test:test@127.0.0.1/test",
            "Access denied for user 'test'@'localhost' (using password: YES) to database "
            "'test' at mysql+pymysql://test:test@127.0.0.1:3306/test (password='test')",
            "Access denied for user 'test'@'localhost' (using password: YES) to database "
            "'test' at mysql+pymysql://test:***@127.0.0.1:3306/test (password='***')",
            id="also-ordinary-text",
        ),
    ],
)
def test_scrub_masks_a_password_of_any_length_where_it_is_a_credential(
    url: str, driver: str, masked: str
) -> None:
    from agent_sessions.cli.app import begin, scrub
    from agent_sessions.ops.migrate import redacted

    begin(["list", url])
    assert scrub(f"cannot open {url}; {driver}") == f"cannot open {redacted(url)}; {masked}"


def test_show_reads_the_key_from_a_file_or_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.fernet import Fernet

    from agent_sessions import EncryptedSession

    key = Fernet.generate_key().decode()
    db = tmp_path / "enc.db"

    async def fill() -> None:
        async with SQLiteSession("secret", str(db)) as raw:
            await EncryptedSession(raw, encryption_key=key).add_items([_msg("classified")])

    asyncio.run(fill())
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    url = f"sqlite:///{db}"
    assert main(["show", url, "secret", "--decrypt", "--key-file", str(key_file)]) == 0
    assert _lines(capsys.readouterr().out) == [_msg("classified")]
    monkeypatch.setenv("AGENT_SESSIONS_KEY_FILE", str(key_file))
    assert main(["show", url, "secret", "--decrypt"]) == 0
    assert _lines(capsys.readouterr().out) == [_msg("classified")]
    assert main(["show", url, "secret", "--decrypt", "--key-file", str(tmp_path / "no")]) == 1
    assert "cannot read the key file" in capsys.readouterr().err
    monkeypatch.delenv("AGENT_SESSIONS_KEY_FILE")
    monkeypatch.setattr("sys.stdin", io.StringIO(key + "\n"))  # `--key-file -`: piped in
    assert main(["show", url, "secret", "--decrypt", "--key-file", "-"]) == 0
    assert _lines(capsys.readouterr().out) == [_msg("classified")]


def test_copy_reports_progress_and_what_an_interruption_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_sessions.cli import app

    src, dst = f"sqlite:///{tmp_path / 'src.db'}", f"sqlite:///{tmp_path / 'dst.db'}"
    _fill(Target("src", src, {}), {"a": 2, "b": 3, "c": 1})
    monkeypatch.setenv("AGENT_SESSIONS_PROGRESS_EVERY", "0")  # a line per session
    counted = app._Meter.session

    def interrupt_after_two(meter: Any, sid: str, items: int) -> None:
        counted(meter, sid, items)
        if meter.sessions == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(app._Meter, "session", interrupt_after_two)
    assert main(["copy", src, dst]) == 130
    err = capsys.readouterr().err
    assert "copying: 1/3 session(s), 2 item(s), ETA" in err
    assert "interrupted; 2 session(s) and side store(s) with 5 item(s) were done" in err
    assert "run the same command again to resume" in err
    monkeypatch.setattr(app._Meter, "session", counted)
    assert main(["copy", src, dst, "--quiet"]) == 0
    out = capsys.readouterr()
    assert out.err == ""  # --quiet: no progress
    assert out.out == (
        "copied 1 session(s) and 0 side store(s): 1 item(s) written; 2 session(s) and side "
        "store(s) already complete\n"
    )
    export = tmp_path / "e.jsonl"
    assert main(["export", src, "-O", str(export), "-q"]) == 0
    capsys.readouterr()
    assert main(["import", f"sqlite:///{tmp_path / 'i.db'}", str(export)]) == 0
    progress = capsys.readouterr().err.splitlines()
    assert progress[0].startswith("importing: 1 session(s), 2 item(s), ETA 0:00:0")
    assert progress[-1].startswith("importing: 3 session(s), 6 item(s), ETA 0:00:00")


def test_list_keeps_long_ids_whole_and_stats_counts_side_stores_by_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_sessions import AdvancedSession

    url = f"sqlite:///{tmp_path / 'kinds.db'}"
    long_id = "tenant-" + "x" * 150
    _fill(Target("sqlite", url, {}), {long_id: 1, "alice": 2}, branch="alice")

    async def usage() -> None:
        async with await Target("sqlite", url, {}).open("carol") as s:
            advanced = AdvancedSession(s)
            await advanced.add_items([_msg("hi")])
            await advanced.store_run_usage(_usage_result())

    asyncio.run(usage())
    assert main(["list", url]) == 0  # piped (captured): no table, no ellipsis
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("alice", "2"), ("carol", "1"), (long_id, "1")]
    assert main(["stats", url, "--json"]) == 0
    kinds = json.loads(capsys.readouterr().out)["side_stores_by_kind"]
    assert set(kinds) >= {"branches", "usage"}
    assert kinds["usage"] == {"stores": 1, "items": 1}
    assert main(["stats", url]) == 0
    assert "usage" in capsys.readouterr().out


def _usage_result() -> Any:
    from agents.usage import Usage

    class Result:
        context_wrapper = type("Ctx", (), {"usage": Usage(requests=1, input_tokens=3)})()

    return Result()


def test_sdk_redis_lists_no_keys_of_our_layout_under_the_same_prefix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agents.extensions.memory import RedisSession as SDKRedisSession
    from redis.asyncio import Redis

    require_server("Redis", "127.0.0.1", 6379)
    prefix = f"clisdk{RUN}{uuid.uuid4().hex[:6]}"

    async def fill() -> None:
        async with await open_session(REDIS_URL, "ours", key_prefix=prefix) as ours:
            await ours.add_items([_msg("ours")])
        client = Redis.from_url(REDIS_URL)
        try:
            theirs = SDKRedisSession("theirs", redis_client=client, key_prefix=prefix)
            await theirs.add_items([_msg("theirs")])
        finally:
            await client.aclose()

    from agent_sessions import open_session

    try:
        asyncio.run(fill())
        assert main(["list", f"sdk+{REDIS_URL}", "-o", f"key_prefix={prefix}", "--json"]) == 0
        listed = _lines(capsys.readouterr().out)
        assert [(r["session_id"], r["item_count"]) for r in listed] == [("theirs", 1)]
    finally:
        asyncio.run(drop_redis_keys(REDIS_URL, f"{prefix}*"))


def test_show_a_branch_the_agents_view_pretty_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_sessions import AdvancedSession, CompactionSession, TTLSession

    db = tmp_path / "show.db"
    url = f"sqlite:///{db}"
    hour_ago = time.time() - 3600

    def turn(i: int) -> list[Any]:
        return [
            _msg(f"q{i}"),
            {"role": "assistant", "content": [{"type": "output_text", "text": f"a{i}"}]},
        ]

    async def fill() -> None:
        async with SQLiteSession("adv", str(db)) as s:
            advanced = AdvancedSession(s)
            await advanced.add_items(turn(1) + turn(2))
            await advanced.create_branch_from_turn(2, "retry")
            await advanced.add_items(turn(3))
            await advanced.switch_to_branch("main")
        async with SQLiteSession("long", str(db)) as s:
            compaction = CompactionSession(s, keep_last=2)
            await compaction.add_items(turn(1) + turn(2) + turn(3))
            await compaction.compact()
        async with SQLiteSession("aging", str(db)) as s:
            await TTLSession(s, item_ttl=60, clock=lambda: hour_ago).add_items(turn(1))
            await TTLSession(s, item_ttl=60).add_items(turn(2))

    asyncio.run(fill())
    assert main(["list", url, "--json"]) == 0 and main(["stats", url, "--json"]) == 0
    before = capsys.readouterr().out
    assert main(["show", url, "adv", "--branch", "retry", "--pretty"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "user: q1",
        "assistant: a1",
        "user: q3",
        "assistant: a3",
    ]
    assert main(["show", url, "adv", "--view", "--pretty"]) == 0  # main is current
    assert capsys.readouterr().out.splitlines() == [
        "user: q1",
        "assistant: a1",
        "user: q2",
        "assistant: a2",
    ]
    assert main(["show", url, "adv", "--branch", "nope"]) == 1
    assert "no branch 'nope'; its branches: 'main', 'retry'" in capsys.readouterr().err

    assert main(["show", url, "long", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 6  # as stored
    assert main(["show", url, "long", "--view", "--json"]) == 0
    seen = json.loads(capsys.readouterr().out)
    assert seen[-2:] == turn(3) and len(seen) < 6 and "q1" in json.dumps(seen[0])  # summary

    assert main(["show", url, "aging", "--view"]) == 1
    assert "pass --ttl" in capsys.readouterr().err
    assert main(["show", url, "aging", "--view", "--item-ttl", "60", "--pretty"]) == 0
    assert capsys.readouterr().out.splitlines() == ["user: q2", "assistant: a2"]
    assert main(["list", url, "--json"]) == 0 and main(["stats", url, "--json"]) == 0
    assert capsys.readouterr().out == before  # reading through the layers wrote nothing


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
    err = capsys.readouterr().err
    assert "check that it is running" in err and "write" not in err  # a read says no more
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


def test_reading_commands_do_not_import_the_sdk(tmp_path: Path) -> None:
    db = tmp_path / "fast.db"
    asyncio.run(_add(db, "s1", [_msg("hi")]))
    url = f"sqlite:///{db}"
    commands = [
        f"list {url}",
        f"show {url} s1",
        f"stats {url}",
        f"export {url} -q",
        f"delete {url} s1 --yes",
    ]
    code = (
        "import sys; from agent_sessions.cli import main; "
        f"rcs = [main(a.split()) for a in {commands!r}]; print(rcs, 'agents' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("[0, 0, 0, 0, 0] False")


def test_the_sdk_imported_after_the_backends_is_one_sdk() -> None:
    code = """
import asyncio, sys
from agent_sessions.cli import light_sdk
light_sdk.load_session_protocol()
from agent_sessions import SQLiteSession
assert "agents" not in sys.modules
# A module that needs more of the SDK is not loaded early, and leaves nothing behind.
assert not light_sdk._standalone(["agents.memory.sqlite_session"])
assert "agents" not in sys.modules and "agents.memory.sqlite_session" not in sys.modules
import agents.memory.session
from agents import Agent, Runner
from agents.testing import ScriptedModel, assistant_message
from agent_sessions.core import base
assert agents.memory.session.SessionABC is base.SessionABC is agents.SessionABC
assert agents.memory.SessionSettings is base.SessionSettings

async def run():
    async with SQLiteSession("s") as session:
        agent = Agent("a", model=ScriptedModel([[assistant_message("hello")]]))
        await Runner.run(agent, "hi", session=session)
        print(len(await session.get_items()), isinstance(session, agents.memory.SessionABC))

asyncio.run(run())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "True"]


def test_demo_runs_offline_and_undoes_the_wrong_turn(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = subprocess.run(
        [sys.executable, "-m", "agent_sessions", "demo", "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
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
    out = capsys.readouterr()
    assert "OPENAI_API_KEY" in out.err and out.out == ""  # an error goes to stderr


def test_import_progress_counts_bytes_as_the_file_size_does(tmp_path: Path) -> None:
    """The ETA divides bytes read by the file's size in bytes: a non-ASCII export reaches 100%."""
    from agent_sessions.cli.app import _Meter

    path = tmp_path / "export.jsonl"
    path.write_text('{"a": "héllo wörld"}\n{"b": "日本語"}\nplain\n', encoding="utf-8")
    meter = _Meter("importing", quiet=True)
    with open(path, encoding="utf-8") as lines:
        assert list(meter.reading(lines, path.stat().st_size))
    assert meter.done == meter.total == path.stat().st_size
