"""Smoke test of a core-only install (no extras), run by ``make smoke-core`` in a fresh venv.

Run it from outside the repository so it imports the installed package. It checks that the
core works (import, ``open_session`` on SQLite and memory, the offline demo) and that every
optional part says which extra to install instead of failing with a bare ModuleNotFoundError.
Pass ``--sqlalchemy-only`` after installing SQLAlchemy without a driver: then the driver
hints for PostgreSQL, MariaDB and ``sqlite+aiosqlite`` URLs are checked.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile

DISTRIBUTION = "agent-sessions-store"
checks: list[str] = []


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"core-only smoke test FAILED: {what}")
    checks.append(what)


def expect_hint(action: object, extra: str, what: str) -> None:
    """Run ``action`` (a callable or a coroutine) and require a MissingDependencyError that
    names ``pip install "agent-sessions-store[extra]"``."""
    from agent_sessions.errors import MissingDependencyError

    try:
        if asyncio.iscoroutine(action):
            asyncio.run(action)
        else:
            action()  # type: ignore[operator]
    except MissingDependencyError as exc:
        hint = f'pip install "{DISTRIBUTION}[{extra}]"'
        check(hint in str(exc), f"{what}: hint names {hint} ({exc})")
        return
    raise SystemExit(f"core-only smoke test FAILED: {what} raised no MissingDependencyError")


def absent(module: str) -> bool:
    return importlib.util.find_spec(module) is None


async def core_roundtrip(path: str) -> None:
    from agent_sessions import open_session

    async with await open_session(f"sqlite:///{path}", "smoke") as session:
        await session.add_items([{"role": "user", "content": "hi"}])
        check(await session.get_items() == [{"role": "user", "content": "hi"}], "sqlite round trip")
    session = await open_session(f"sqlite:///{path}", "smoke")
    check(len(await session.get_items()) == 1, "sqlite reopen keeps the item")
    check(await session.pop_item() == {"role": "user", "content": "hi"}, "sqlite pop")
    await session.close()
    memory = await open_session("memory://", "smoke")
    await memory.add_items([{"role": "user", "content": "x"}])
    check(await memory.get_items(1) == [{"role": "user", "content": "x"}], "memory round trip")
    await memory.close()


def main() -> None:
    import agent_sessions

    here = os.path.dirname(os.path.abspath(agent_sessions.__file__))
    check("site-packages" in here, f"imports the installed package ({here})")
    version = importlib.metadata.version(DISTRIBUTION)
    check(agent_sessions.__version__ == version, f"__version__ {version} matches the metadata")

    check(absent("aiosqlite"), "aiosqlite is not installed (SQLiteSession needs no driver)")
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(core_roundtrip(os.path.join(tmp, "smoke.db")))
        demo = subprocess.run(
            [sys.executable, "-m", "agent_sessions", "demo", "--db", os.path.join(tmp, "d.db")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        check(demo.returncode == 0, f"demo exits 0 (stderr: {demo.stderr[-500:]})")
        check("wrong exchange is gone from history: True" in demo.stdout, "demo output")

    from agent_sessions import open_session

    if "--sqlalchemy-only" in sys.argv:
        check(
            not absent("sqlalchemy")
            and absent("asyncpg")
            and absent("asyncmy")
            and absent("aiosqlite"),
            "sqlalchemy installed without drivers",
        )
        expect_hint(
            open_session("sqlite+aiosqlite:///unused.db", "s"),
            "sqlalchemy",
            "sqlite+aiosqlite URL without aiosqlite",
        )
        expect_hint(
            open_session("postgresql+asyncpg://u@127.0.0.1/db", "s"),
            "postgres",
            "postgresql+asyncpg URL without asyncpg",
        )
        expect_hint(
            open_session("mysql+asyncmy://u@127.0.0.1/db", "s"),
            "mysql",
            "mysql+asyncmy URL without asyncmy",
        )
    else:
        for module, name, extra, url in [
            ("redis", "RedisSession", "redis", "redis://127.0.0.1:6379/0"),
            ("sqlalchemy", "SQLAlchemySession", "sqlalchemy", None),
            ("pymongo", "MongoDBSession", "mongodb", "mongodb://127.0.0.1:27017"),
        ]:
            check(absent(module), f"{module} is not installed")
            expect_hint(
                lambda name=name: getattr(agent_sessions, name),
                extra,
                f"from agent_sessions import {name}",
            )
            expect_hint(
                lambda m=module: importlib.import_module(
                    f"agent_sessions.backends.{ {'pymongo': 'mongodb'}.get(m, m) }"
                ),
                extra,
                f"import agent_sessions.backends for {module}",
            )
            if url is not None:
                expect_hint(open_session(url, "s"), extra, f"open_session({url!r})")
        expect_hint(
            open_session("postgresql+asyncpg://u@127.0.0.1/db", "s"),
            "postgres",
            "open_session(postgresql+asyncpg://) without sqlalchemy",
        )
        expect_hint(
            open_session("postgres://u@127.0.0.1/db", "s"),
            "postgres",
            "open_session(postgres://) without a driver",
        )
        expect_hint(
            open_session("sdk+redis://127.0.0.1:6379/0", "s"),
            "redis",
            "open_session(sdk+redis://) without redis",
        )
        cli = subprocess.run(
            [sys.executable, "-m", "agent_sessions", "list", "redis://127.0.0.1:6379/0"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        check(
            cli.returncode != 0 and f'pip install "{DISTRIBUTION}[redis]"' in cli.stderr,
            f"CLI on a redis:// URL names the extra (stderr: {cli.stderr.strip()[-300:]})",
        )
        if absent("cryptography"):
            expect_hint(
                lambda: agent_sessions.EncryptedSession,
                "encryption",
                "from agent_sessions import EncryptedSession",
            )
    for line in checks:
        print(f"ok  {line}")
    print(f"{len(checks)} passed, 0 failed")


if __name__ == "__main__":
    main()
