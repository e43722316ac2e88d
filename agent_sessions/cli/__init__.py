"""The ``agent-sessions`` command line (also ``python -m agent_sessions``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

Options = dict[str, Any]


def _option(text: str) -> tuple[str, Any]:
    """Parse ``KEY=VALUE``; VALUE is read as JSON when it is JSON (60, true, "x"), else text."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE with KEY a backend option name (e.g. table_prefix=app_), "
            f"got {text!r}"
        )
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


async def _show(url: str, session_id: str, limit: int | None, options: Options) -> int:
    from ..core.registry import open_session

    session = await open_session(url, session_id, **options)
    try:
        for item in await session.get_items(limit):
            print(json.dumps(item, ensure_ascii=False))
    finally:
        close = getattr(session, "close", None)
        if close is not None:
            await close()
    return 0


async def _clear(url: str, session_id: str, options: Options) -> int:
    from ..core.registry import open_session

    session = await open_session(url, session_id, **options)
    try:
        await session.clear_session()
    finally:
        close = getattr(session, "close", None)
        if close is not None:
            await close()
    print(f"cleared {session_id!r}")
    return 0


async def _purge(
    url: str,
    session_ids: list[str],
    ttl: float | None,
    sliding: bool,
    item_ttl: float | None,
    options: Options,
) -> int:
    from ..core.registry import open_session
    from ..wrappers.ttl import TTLSession

    for session_id in session_ids:
        inner = await open_session(url, session_id, **options)
        try:
            removed = await TTLSession(
                inner, ttl=ttl, sliding=sliding, item_ttl=item_ttl
            ).purge_expired()
        finally:
            close = getattr(inner, "close", None)
            if close is not None:
                await close()
        print(f"{session_id}: removed {removed} expired item(s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agent-sessions`` console script."""
    parser = argparse.ArgumentParser(prog="agent-sessions", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a conversation, undo a turn, re-ask (offline)")
    demo.add_argument("--db", help="SQLite file to use (default: a new temporary file)")
    demo.add_argument("--live", action="store_true", help="use a real model (OPENAI_API_KEY)")
    demo.add_argument("--model", default="gpt-4.1-mini", help="model for --live")
    show = sub.add_parser("show", help="print a session's items as JSON lines")
    show.add_argument("url", help="store URL, e.g. sqlite:///app.db or redis://localhost:6379/0")
    show.add_argument("session_id")
    show.add_argument("--limit", type=int, default=None, help="only the latest N items")
    clear = sub.add_parser("clear", help="delete every item of a session")
    clear.add_argument("url")
    clear.add_argument("session_id")
    purge = sub.add_parser(
        "purge", help="physically remove expired items of TTLSession-written sessions"
    )
    purge.add_argument("url")
    purge.add_argument("session_ids", nargs="+", metavar="session_id")
    purge.add_argument("--ttl", type=float, help="session ttl in seconds, as the app uses it")
    purge.add_argument("--absolute", action="store_true", help="the app uses sliding=False")
    purge.add_argument("--item-ttl", type=float, help="per-item ttl in seconds")
    for command in (show, clear, purge):
        command.add_argument(
            "-o", "--option", type=_option, action="append", default=[], metavar="KEY=VALUE",
            help="a keyword for open_session, e.g. -o table_prefix=app_ -o key_prefix=myapp "
            "(VALUE is parsed as JSON when it is JSON); repeatable",
        )
    args = parser.parse_args(argv)
    options: Options = dict(getattr(args, "option", []))
    try:
        if args.command == "demo":
            from .demo import run_demo

            return asyncio.run(run_demo(args.db, args.live, args.model, sys.stdout))
        if args.command == "show":
            return asyncio.run(_show(args.url, args.session_id, args.limit, options))
        if args.command == "purge":
            if args.ttl is None and args.item_ttl is None:
                parser.error("purge needs --ttl and/or --item-ttl, the values the app uses")
            return asyncio.run(
                _purge(
                    args.url, args.session_ids, args.ttl, not args.absolute, args.item_ttl,
                    options,
                )
            )
        return asyncio.run(_clear(args.url, args.session_id, options))
    except Exception as exc:  # a CLI reports, it does not dump tracebacks
        from ..errors import SessionError

        if not isinstance(exc, (SessionError, ValueError, TypeError, NotImplementedError)):
            raise
        print(f"agent-sessions: {exc}", file=sys.stderr)
        return 1
