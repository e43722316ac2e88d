"""The commands of ``agent-sessions`` (Typer + Rich); each imports what it uses when it runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import nullcontext, suppress
from datetime import datetime, timedelta, timezone
from typing import IO, Annotated, Any, NoReturn, TypeVar

import typer
import typer.core

T = TypeVar("T")

_type_column = getattr(typer.core.TyperOption, "display_type_rich", None)


def _no_flag_type(self: Any, ctx: Any) -> str | None:
    # Typer 0.29 prints a flag's type ("--json <bool>") as if it took a value (issue 41;
    # tests/test_cli_edges.py::test_help_shows_flags_without_a_value_placeholder).
    return None if self.is_flag else _type_column(self, ctx)  # type: ignore[misc]


if _type_column is not None:  # the Typer releases that print types at all
    typer.core.TyperOption.display_type_rich = _no_flag_type  # type: ignore[method-assign]

app = typer.Typer(
    name="agent-sessions",
    help="Inspect, export, copy and clean up the session stores of agent_sessions.\n\n"
    "A store is named by URL: sqlite:///app.db, redis://localhost:6379/0, "
    "postgresql+asyncpg://user:pw@host/db, mysql+asyncmy://..., mongodb://host/db, memory://.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _opt(help: str, *decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, help=help, **kw)


Url = Annotated[str, typer.Argument(help="store URL, e.g. sqlite:///app.db", show_default=False)]
Options = Annotated[
    list[str] | None,
    _opt(
        "backend option for open_session, repeatable (e.g. -o table_prefix=app_ -o "
        "key_prefix=myapp); VALUE is read as JSON when it is JSON",
        "-o",
        "--option",
        metavar="KEY=VALUE",
    ),
]
Json = Annotated[bool, _opt("print JSON instead of a table", "--json")]
Yes = Annotated[bool, _opt("do not ask for confirmation", "--yes", "-y")]
Prefix = Annotated[str | None, _opt("only session ids starting with it", "--prefix")]
Renumber = Annotated[
    bool,
    _opt(
        "into a store that numbers items anew (an SDK layout): copy the sessions without their "
        "side stores (branches, usage, compaction, TTL), which would point at the wrong items there"
    ),
]
Ids = Annotated[list[str] | None, typer.Argument(help="session ids (default: all)")]
DeleteIds = Annotated[
    list[str] | None,
    typer.Argument(help="session ids (or select them with --prefix, --all or --user)"),
]
SideStores = Annotated[
    bool,
    _opt(
        "include each session's side stores (branches, usage, compaction records)",
        "--side-stores/--no-side-stores",
    ),
]
Quiet = Annotated[bool, _opt("print no progress on stderr", "--quiet", "-q")]
Replace = Annotated[bool, _opt("overwrite destination sessions that hold other items")]
Ttl = Annotated[float | None, _opt("the app's TTLSession ttl in seconds")]
ItemTtl = Annotated[float | None, _opt("the app's per-item ttl in seconds")]
Absolute = Annotated[bool, _opt("the app uses TTLSession(sliding=False)", "--absolute")]


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"agent-sessions {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        _opt("print the version and exit", "--version", "-V", callback=_version, is_eager=True),
    ] = False,
) -> None:
    """Inspect, export, copy and clean up the session stores of agent_sessions."""


# -- helpers ---------------------------------------------------------------------------------

_URLS: set[str] = set()
"""Store URLs of this run, so that no message shows their passwords (see ``scrub``)."""
_INTERRUPTED: list[Callable[[], str]] = []
"""Notes that Ctrl-C prints: what was done and how to resume."""
_RESUME = "run the same command again to resume (complete sessions are skipped)"


def begin(args: list[str]) -> None:
    """Start a run: note its store URLs (to redact them), clear the notes."""
    _URLS.clear()
    _URLS.update(arg for arg in args if "://" in arg)
    _INTERRUPTED.clear()


def scrub(text: str) -> str:
    """``text`` with this run's store URLs redacted and their passwords masked where they
    stand as credentials: ``:password@`` (a URL's userinfo, however the driver spells the
    rest) and ``password=``/``password:`` (``pass``, ``passwd``, ``pwd``; quoted or not, as
    connection strings and dicts print them), as written in the URL or percent-decoded.
    Elsewhere the same characters are left alone: a password may be a word of the message."""
    from urllib.parse import unquote, urlsplit

    from ..ops.migrate import redacted

    # The id the CLI opens a store with is no session of the user's (issue 41).
    text = re.sub(r"\.? ?\(session '(?:agent-sessions-cli|agent-sessions-catalog)'\)", "", text)
    for url in sorted(_URLS, key=len, reverse=True):
        text = text.replace(url, redacted(url))
        with suppress(ValueError):  # a URL urlsplit rejects has no password to mask
            if password := urlsplit(url).password:
                for form in {password, unquote(password)}:
                    pw = re.escape(form)
                    text = re.sub(rf":{pw}@", ":***@", text)
                    text = re.sub(
                        rf"(?i)(\b(?:pass(?:word|wd)?|pwd)['\"]?\s*[=:]\s*(['\"]?)){pw}"
                        r"(?=\2(?![^\s'\",;&)}\]]))",
                        r"\1***",
                        text,
                    )
    return text


def interrupted_note() -> str | None:
    """What the interrupted command did, or None."""
    return "; ".join(note() for note in _INTERRUPTED) or None


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"agent-sessions: error: {scrub(message)}", err=True)
    raise typer.Exit(code)


def _parse_options(texts: list[str] | None, flag: str = "-o") -> dict[str, Any]:
    options: dict[str, Any] = {}
    for text in texts or []:
        key, sep, value = text.partition("=")
        if not sep or not key.isidentifier():
            raise typer.BadParameter(
                f"expected KEY=VALUE with KEY a backend option name (e.g. table_prefix=app_), "
                f"got {text!r}"
                if flag == "-o"
                else f"expected KEY=VALUE, got {text!r}",
                param_hint="'-o' / '--option'" if flag == "-o" else f"'{flag}'",
            )
        options[key] = value
        with suppress(ValueError):
            options[key] = json.loads(value)
    return options


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _when(text: str | None, name: str) -> datetime | None:
    """``90d``/``12h``/``30m``/``45s``/``2w`` ago, or an ISO 8601 time (UTC when no zone)."""
    if text is None:
        return None
    if match := _RELATIVE.match(text.strip()):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        return datetime.now(timezone.utc) - timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"expected a duration ago (90d, 12h, 30m) or an ISO time (2026-01-31T12:00), "
            f"got {text!r}",
            param_hint=name,
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro``; report the package's and the drivers' errors on stderr, exit code 1."""
    from ..errors import SessionError

    try:
        return asyncio.run(coro)
    except (typer.Exit, BrokenPipeError):  # a closed pipe ends the run quietly (see cli.main)
        raise
    except (SessionError, ValueError, TypeError, LookupError, OSError, ImportError) as exc:
        _fail(str(exc) or type(exc).__name__)
    except Exception as exc:  # a driver's own error: say what it was, without a traceback
        _fail(f"{type(exc).__name__}: {exc}")


def _in_store(url: str, option: list[str] | None, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(store)`` on the existing store at ``url`` (``-o`` options), as ``_run``."""
    options = _parse_options(option)

    async def go() -> T:
        from ..ops.migrate import Store

        async with await Store.open(url, options, read_only=True) as store:
            return await work(store)

    return _run(go())


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    question = scrub(question)
    if not sys.stdin.isatty():
        _fail(f"{question} Not confirmed: stdin is not a terminal; pass --yes to proceed")
    if not typer.confirm(question, default=False, err=True):
        _fail("aborted; nothing was changed")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _many(n: int, word: str) -> str:
    """``n word`` with ``word`` in the plural unless ``n`` is 1."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def _names(ids: Any, most: int = 10) -> str:
    """``ids`` as a short list for a question: the first ``most`` and how many more."""
    ids = list(ids)
    shown = ", ".join(repr(sid) for sid in ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


async def _chosen(store: Any, ids: list[str] | None, prefix: str | None) -> list[str]:
    """The named ``ids`` (memory scopes by their CLI names), failing (before anything changes)
    on those the store does not hold (a store that cannot list is taken at its word); else the
    listed ones under ``prefix``."""
    if not ids:
        return [info.session_id async for info in _roots(store.require_catalog(), prefix)]
    ids = [await _stored(store, name) for name in dict.fromkeys(ids)]
    missing = (
        []
        if store.catalog is None
        else [sid for sid in ids if await store.catalog.get(sid) is None]
    )
    if missing:
        _fail(
            f"no session {_names(map(_shown, missing))} in {store.url}; nothing was changed "
            "(list the ids with `agent-sessions list URL`)"
        )
    return ids


async def _stored(store: Any, name: str) -> str:
    """The id the CLI name ``name`` stands for: ``memory:<agent>:<user>`` names that memory
    scope where the store holds it, any other name the session of that id. Fails when a
    session and a scope share the name (a session id chosen before scopes had their own)."""
    from ..core.ids import SCOPE_MARK, is_scope_id

    scope = SCOPE_MARK + name
    if store.catalog is None or not is_scope_id(scope) or not await store.catalog.get(scope):
        return name
    if await store.catalog.get(name) is not None:
        _fail(
            f"both a memory scope and a session are named {name!r} in {store.url}; nothing was "
            "changed. Name the session by its id in Python (SessionCatalog.delete_sessions, "
            "or agent_sessions.memory.scope_id for the scope)"
        )
    return scope


async def _roots(catalog: Any, prefix: str | None, **filters: Any) -> AsyncIterator[Any]:
    """The sessions and memory scopes whose CLI names start with ``prefix`` (scopes first)."""
    from ..core.ids import SCOPE_MARK

    if prefix:
        async for info in catalog.iter_sessions(prefix=SCOPE_MARK + prefix, **filters):
            yield info
    async for info in catalog.iter_sessions(prefix=prefix, **filters):
        yield info


def _shown(session_id: str) -> str:
    """``session_id`` as the CLI names it (a memory scope as ``memory:<agent>:<user>``)."""
    from ..core.ids import display_id

    return display_id(session_id)


def _kind(session_id: str) -> str:
    from ..core.ids import is_scope_id

    return "memory scope" if is_scope_id(session_id) else "session"


# -- read-only commands ------------------------------------------------------------------------


@app.command("list")
def list_sessions(
    url: Url,
    prefix: Prefix = None,
    updated_before: Annotated[
        str | None, _opt("only sessions last written before this (90d = 90 days ago, or ISO)")
    ] = None,
    updated_after: Annotated[
        str | None, _opt("only sessions last written at or after this")
    ] = None,
    limit: Annotated[int | None, _opt("show at most this many", min=1)] = None,
    page_size: Annotated[int, _opt("sessions per query", min=1, max=10000)] = 100,
    user: Annotated[str | None, _opt("only sessions tagged with this user_id", "--user")] = None,
    meta: Annotated[
        list[str] | None,
        _opt(
            "only sessions whose metadata has KEY=VALUE (VALUE as JSON when it is JSON), "
            "repeatable",
            "--meta",
            metavar="KEY=VALUE",
        ),
    ] = None,
    as_json: Json = False,
    option: Options = None,
) -> None:
    """List sessions and memory scopes with their item count, times, kind, user and title
    (reads only)."""
    before = _when(updated_before, "--updated-before")
    after = _when(updated_after, "--updated-after")
    wanted = _parse_options(meta, "--meta")

    async def read(store: Any) -> list[Any]:
        from ..ops.catalog import CatalogQuery

        catalog = store.require_catalog()
        rows: list[Any] = []
        listed: AsyncIterator[Any]
        if user is not None or wanted:
            window = CatalogQuery(1, None, prefix, after, before)
            found = catalog.tagged(user_id=user, metadata=wanted)
            listed = (info async for info in found if window.matches(info))
        else:
            listed = _roots(
                catalog,
                prefix,
                updated_before=before,
                updated_after=after,
                page_size=page_size,
            )
        async for info in listed:
            rows.append(info)
            if len(rows) == limit:
                break
        return rows if user is not None or wanted else await catalog.with_tags(rows)

    rows = _in_store(url, option, read)
    if as_json:
        return typer.echo(
            "".join(
                _json(
                    {**i.as_dict(), "session_id": _shown(i.session_id), "kind": _kind(i.session_id)}
                )
                + "\n"
                for i in rows
            ),
            nl=False,
        )
    cells = [
        (
            _shown(i.session_id),
            str(i.item_count),
            _time(i.created_at),
            _time(i.updated_at),
            i.user_id or "-",
            i.title or "-",
            _kind(i.session_id),
        )
        for i in rows
    ]
    console = _console()
    if not console.is_terminal:  # piped: whole ids, one tab-separated line per session
        typer.echo("".join("\t".join(cell) + "\n" for cell in cells), nl=False)
    else:
        from rich.table import Table

        table = Table(
            "session id",
            "items",
            "created (UTC)",
            "updated (UTC)",
            "user",
            "title",
            "kind",
            box=None,
        )
        table.columns[0].overflow = "fold"  # a long id wraps, never an ellipsis
        for cell in cells:
            table.add_row(*cell)
        console.print(table)
    _console(stderr=True).print(f"{len(rows)} session(s)")


def _type(item: Any) -> Any:
    """The ``type`` of ``item`` (an envelope's), or None."""
    return item.get("type") if isinstance(item, dict) else None


async def _unwrap(items: list[Any], session_id: str, key: str | None) -> list[Any]:
    """TTL envelopes as their items and, with ``key``, encrypted ones decrypted."""
    from ..backends.memory import InMemorySession, InMemoryStore

    for _ in range(8):  # layers nest: TTL over encryption or encryption over TTL
        ttl = [_type(i) == "agent_sessions.ttl" for i in items]
        items = [i.get("item") if wrapped else i for i, wrapped in zip(items, ttl, strict=True)]
        if key and any(_type(i) == "agent_sessions.enc" for i in items):
            from ..wrappers.encrypted import EncryptedSession

            scratch = InMemorySession(session_id, store=InMemoryStore(), _internal_id=True)
            await scratch.add_items(items)
            items = await EncryptedSession(scratch, encryption_key=key, strict=True).get_items()
        elif not any(ttl):
            break
    return items


def _open(path: str, mode: str, what: str) -> IO[str]:
    """``open(path, mode)``, failing with "cannot ``what``: reason"."""
    try:
        return open(path, mode, encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot {what}: {exc.strerror or exc}")


def _read_key(key: str | None, key_file: str | None) -> str | None:
    """``key``, or with ``key_file`` that file's text (stripped; ``-``: standard input)."""
    if key_file is None:
        return key
    reading = f"read the key file {key_file}"
    with nullcontext(sys.stdin) if key_file == "-" else _open(key_file, "r", reading) as file:
        text = file.read().strip()
    if not text:
        _fail(f"the key file {key_file} is empty")
    return text


@app.command()
def show(
    url: Url,
    session_id: Annotated[str, typer.Argument(help="the session to print")],
    limit: Annotated[int | None, _opt("only the latest N items", min=1)] = None,
    decrypt: Annotated[
        bool,
        _opt(
            "decrypt EncryptedSession envelopes (the key from --key-file, AGENT_SESSIONS_KEY, "
            "AGENT_SESSIONS_KEY_FILE or --key)",
            "--decrypt",
        ),
    ] = False,
    key: Annotated[
        str | None,
        _opt(
            "encryption key for --decrypt; prefer --key-file or the AGENT_SESSIONS_KEY variable, "
            "which stay out of the shell history",
            envvar="AGENT_SESSIONS_KEY",
            show_envvar=False,
        ),
    ] = None,
    key_file: Annotated[
        str | None,
        _opt(
            "file holding the encryption key, '-' for stdin (or the AGENT_SESSIONS_KEY_FILE "
            "variable)",
            envvar="AGENT_SESSIONS_KEY_FILE",
            show_envvar=False,
        ),
    ] = None,
    branch: Annotated[
        str | None, _opt("print this branch (BranchingSession/AdvancedSession)")
    ] = None,
    view: Annotated[
        bool,
        _opt(
            "print what the agent sees: the compaction summary plus the newer items of the current "
            "branch, expired items hidden (needs --ttl for a TTLSession)",
            "--view",
        ),
    ] = False,
    ttl: Ttl = None,
    item_ttl: ItemTtl = None,
    absolute: Absolute = False,
    pretty: Annotated[bool, _opt("print 'role: text' lines", "--pretty")] = False,
    as_json: Annotated[bool, _opt("print one JSON array instead of JSON lines", "--json")] = False,
    option: Options = None,
) -> None:
    """Print a session's items as JSON lines, oldest first (reads only; creates nothing).

    TTL envelopes are shown as their items, encrypted ones as stored unless --decrypt. --branch
    and --view read through the layers the session was written with.
    """
    key = _read_key(key, key_file)
    if decrypt and not key:
        raise typer.BadParameter(
            "--decrypt needs --key-file, AGENT_SESSIONS_KEY or --key", param_hint="--key-file"
        )
    key = key if decrypt else None
    if branch is not None and view:
        raise typer.BadParameter(
            "--view shows the current branch; pass either --branch or --view", param_hint="--view"
        )

    async def read(store: Any) -> list[Any]:
        sid = await _stored(store, session_id)
        if store.catalog is not None:
            await store.catalog.require(sid)
            tags = {k: v for k, v in (await store.catalog.tags(sid)).items() if v}
            if tags:  # the session's info, beside (not among) its items
                typer.echo(f"{session_id}: {_json(tags)}", err=True)
        async with store.opened(sid) as session:
            if _kind(sid) == "memory scope":
                return await _scope_records(session, limit)
            if branch is None and not view:
                return await _unwrap(await session.get_items(limit), sid, key)
            layered = await _layers(session, sid, key, (ttl, item_ttl, absolute))
            return await _read_through(store, sid, layered, branch, view, limit)

    items = _in_store(url, option, read)
    if as_json:
        return typer.echo(_json(items))
    for item in items:
        typer.echo(_pretty(item) if pretty else _json(item))


async def _scope_records(root: Any, limit: int | None) -> list[Any]:
    """A memory scope as JSON records: its blocks, then its archive's passages (the latest
    ``limit`` of them)."""
    from dataclasses import asdict

    from ..memory import Memory

    memory = Memory(root)
    await memory.archive.refresh()
    records = [{"block": asdict(block)} for block in await memory.blocks.all()]
    records += [
        {"passage": {k: v for k, v in asdict(p).items() if k not in ("packed", "embedder")}}
        for p in memory.archive.passages
    ]
    return records[-limit:] if limit else records


_Expiry = tuple[float | None, float | None, bool]  # the app's (ttl, item_ttl, absolute)


def _ttl_session(inner: Any, expiry: _Expiry) -> Any:
    """``inner`` under TTLSession with the app's ``(ttl, item_ttl, absolute)``."""
    from ..wrappers.ttl import TTLSession

    ttl, item_ttl, absolute = expiry
    return TTLSession(inner, ttl=ttl, sliding=not absolute, item_ttl=item_ttl)


async def _layers(session: Any, sid: str, key: str | None, expiry: _Expiry) -> Any:
    """``session`` under TTLSession and EncryptedSession as its newest envelope says."""
    from ..wrappers.ttl import TTL_TYPE

    for _ in range(2):
        kind = _type(next(iter(await session.get_items(1)), None))
        if kind == TTL_TYPE:
            if expiry[:2] == (None, None):
                _fail(
                    f"session {sid!r} was written through TTLSession: pass --ttl (and "
                    "--item-ttl, --absolute) as the app uses, so that expired items are hidden"
                )
            session = _ttl_session(session, expiry)
        elif kind == "agent_sessions.enc":
            if key is None:
                _fail(f"session {sid!r} is encrypted: pass --decrypt with --key-file")
            from ..wrappers.encrypted import EncryptedSession

            session = EncryptedSession(session, encryption_key=key, strict=True)
        else:
            break
    return session


async def _read_through(
    store: Any, sid: str, session: Any, branch: str | None, view: bool, limit: int | None
) -> list[Any]:
    """Read ``session`` as branch ``branch``, or (``view``) as the agent sees it."""
    from ..core.catalog import side_store_kind

    kinds = {side_store_kind(s) for s in await store.require_catalog().family(sid)}
    if branch is not None or "branches" in kinds:
        from ..wrappers.branching import BranchingSession

        session = BranchingSession(session)
        if branch is not None:
            names = [b["branch_id"] for b in await session.list_branches()]
            if branch not in names:
                _fail(f"session {sid!r} has no branch {branch!r}; its branches: {_names(names)}")
            return list(await session.get_items(limit, branch_id=branch))
    if "compaction" in kinds:
        from ..wrappers.compaction import CompactionSession

        session = CompactionSession(session)
    return list(await session.get_items(limit))


def _pretty(item: Any) -> str:
    """``item`` as one ``role: text`` line (tool calls as ``name(arguments)``)."""
    if not isinstance(item, dict):
        return _json(item)
    content = item.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list) and all(isinstance(p, dict) for p in content):
        text = " ".join(str(p.get("text", p.get("refusal", ""))) for p in content)
    elif item.get("type") == "function_call":
        text = f"{item.get('name')}({item.get('arguments', '')})"
    elif "output" in item:
        text = str(item["output"])
    else:
        text = _json({k: v for k, v in item.items() if k not in ("role", "type")})
    return f"{item.get('role') or item.get('type') or 'item'}: {' '.join(text.split())}"


@app.command()
def stats(url: Url, as_json: Json = False, option: Options = None) -> None:
    """Print totals: sessions, items, side stores, oldest and newest update (reads only)."""
    totals = _in_store(url, option, lambda store: store.require_catalog().stats())
    if as_json:
        return typer.echo(_json(totals))
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for name, value in totals.items():
        if name == "side_stores_by_kind":
            for kind, n in value.items():
                table.add_row(
                    f"  {kind}", f"{_many(n['stores'], 'store')}, {_many(n['items'], 'item')}"
                )
        else:
            table.add_row(name.replace("_", " "), "-" if value is None else str(value))
    _console().print(table)


@app.command("export")
def export_sessions(
    url: Url,
    session_ids: Ids = None,
    prefix: Prefix = None,
    output: Annotated[str, _opt("file to write, '-' for stdout", "--output", "-O")] = "-",
    side_stores: SideStores = True,
    quiet: Quiet = False,
    option: Options = None,
) -> None:
    """Write sessions as JSON lines (one item per line) to a file or stdout (reads only)."""
    from ..ops.migrate import export_store

    options = _parse_options(option)
    chosen = _named(url, option, session_ids, prefix)
    with nullcontext(sys.stdout) if output == "-" else _open(output, "w", f"write {output}") as out:
        report = _metered(
            "exporting",
            quiet,
            lambda meter: export_store(
                url,
                out,
                session_ids=chosen,
                options=options,
                side_stores=side_stores,
                on_session=meter.session,
            ),
            "run the same command again to export them all",
        )
    _console(stderr=True).print(
        f"exported {report.sessions} session(s), {report.side_stores} side store(s), "
        f"{report.items} item(s)"
    )


def _named(
    url: str, option: list[str] | None, ids: list[str] | None, prefix: str | None
) -> list[str] | None:
    """The ids that ``ids`` or ``prefix`` choose in the store at ``url`` (memory scopes by
    their CLI names); None for the whole store."""
    if not ids and not prefix:
        return None
    return _in_store(url, option, lambda store: _chosen(store, ids, prefix))


# -- writing commands --------------------------------------------------------------------------


def _metered(
    verb: str, quiet: bool, work: Callable[[_Meter], Awaitable[T]], resume: str = _RESUME
) -> T:
    """Run ``work(meter)`` as ``_run`` does, showing its progress."""

    async def go() -> T:
        meter = _Meter(verb, quiet, resume)
        with meter.bar:
            return await work(meter)

    return _run(go())


class _Meter:
    """Progress on stderr: a bar on a terminal, else a line every
    ``AGENT_SESSIONS_PROGRESS_EVERY`` seconds (default 5); the ETA follows sessions planned
    (``plan``) or bytes read (``reading``). Ctrl-C prints what was done."""

    def __init__(self, verb: str, quiet: bool, resume: str = _RESUME) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.verb, self.sessions, self.items, self.done = verb, 0, 0, 0
        self.total: int | None = None
        self.start = self.last = time.monotonic()
        self.every = float(os.environ.get("AGENT_SESSIONS_PROGRESS_EVERY", "5"))
        console = _console(stderr=True)
        self.lines = not quiet and not console.is_terminal
        self.bar = Progress(
            TextColumn(verb),
            BarColumn(),
            TextColumn("{task.fields[sessions]} sessions, {task.fields[items]} items, ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=quiet or not console.is_terminal,
        )
        self.task = self.bar.add_task(verb, total=None, sessions=0, items=0)
        _INTERRUPTED.append(
            lambda: (
                f"{self.sessions} session(s) and side store(s) with {self.items} item(s) were "
                f"done; {resume}"
            )
        )

    def plan(self, ids: list[str]) -> None:
        self.total = len(ids)

    def reading(self, lines: Any, size: int) -> Iterator[str]:
        """Yield ``lines`` (of a UTF-8 input of ``size`` bytes), counting the bytes read."""
        self.total = max(size, 1)
        for line in lines:
            self.done += len(line) if line.isascii() else len(line.encode())
            yield line

    def session(self, sid: str, items: int) -> None:
        self.sessions += 1
        self.items += items
        by_sessions = self.total is not None and not self.done
        done = self.sessions if by_sessions else self.done
        self.bar.update(
            self.task, total=self.total, completed=done, sessions=self.sessions, items=self.items
        )
        now = time.monotonic()
        if self.lines and now - self.last >= self.every:
            self.last = now
            eta = ""
            if self.total and done:
                left = (now - self.start) / done * max(0, self.total - done)
                eta = f", ETA {timedelta(seconds=round(left))}"
            typer.echo(
                f"{self.verb}: {self.sessions}{f'/{self.total}' if by_sessions else ''} "
                f"session(s), {self.items} item(s){eta}",
                err=True,
            )


@app.command("import")
def import_sessions(
    url: Url,
    file: Annotated[str, typer.Argument(help="an export file, '-' for stdin")],
    replace: Replace = False,
    renumber: Renumber = False,
    yes: Yes = False,
    as_json: Json = False,
    quiet: Quiet = False,
    option: Options = None,
) -> None:
    """Write the sessions of an export file into a store (creates what is missing), at their
    item numbers and times; sessions already imported in full are skipped."""
    from ..ops.migrate import import_store

    options = _parse_options(option)
    _confirm(f"Overwrite sessions in {url} that hold other items?", yes or not replace)
    with nullcontext(sys.stdin) if file == "-" else _open(file, "r", f"read {file}") as lines:
        report = _metered(
            "importing",
            quiet,
            lambda meter: import_store(
                url,
                lines if file == "-" else meter.reading(lines, os.fstat(lines.fileno()).st_size),
                options=options,
                replace=replace,
                on_session=meter.session,
                renumber=renumber,
            ),
        )
    _report(report, "imported", as_json)


def _report(report: Any, verb: str, as_json: bool) -> None:
    if as_json:
        return typer.echo(_json(report.as_dict()))
    found = report.sessions + report.side_stores
    if report.items:
        sessions = report.sessions - report.skipped_sessions
        side_stores = report.side_stores - (report.skipped - report.skipped_sessions)
        complete = f"; {report.skipped} session(s) and side store(s) already complete"
        typer.echo(
            f"{verb} {sessions} session(s) and {side_stores} side store(s): "
            f"{report.items} item(s) written{complete if report.skipped else ''}"
        )
    elif found:
        typer.echo(
            f"nothing {verb}: all {found} session(s) and side store(s) were already "
            "complete at the destination"
        )
    else:
        typer.echo(f"nothing {verb}: no session matched")
    if report.renumbered:
        left = report.side_stores_left
        typer.echo(
            f"{report.renumbered} session(s) were numbered anew by the destination"
            + (f"; {left} side store(s) were left behind (--renumber)" if left else ""),
            err=True,
        )


def _store_identity(url: str, options: dict[str, Any]) -> tuple[str, str]:
    """A store's URL normalised (a SQLite file by its real path) and its options."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme.removeprefix("sdk+").split("+")[0] == "sqlite":
        path = url.split("://", 1)[1].removeprefix("/").split("?")[0]
        where = path if path in ("", ":memory:") else os.path.realpath(path)
    else:
        where = f"{parts.netloc.lower()}{parts.path.rstrip('/')}?{parts.query}"
    return f"{scheme}://{where}", json.dumps(options, sort_keys=True, default=str)


@app.command()
def copy(
    src_url: Annotated[str, typer.Argument(help="store to read")],
    dst_url: Annotated[str, typer.Argument(help="store to write (created when missing)")],
    session_ids: Ids = None,
    prefix: Prefix = None,
    replace: Replace = False,
    side_stores: SideStores = True,
    renumber: Renumber = False,
    batch: Annotated[int, _opt("items per write", min=1)] = 500,
    yes: Yes = False,
    as_json: Json = False,
    quiet: Quiet = False,
    option: Options = None,
    src_option: Annotated[
        list[str] | None, _opt("option for SRC only", metavar="KEY=VALUE")
    ] = None,
    dst_option: Annotated[
        list[str] | None, _opt("option for DST only", metavar="KEY=VALUE")
    ] = None,
) -> None:
    """Copy sessions with their side stores between any two stores (resumable, verified).

    E.g. SQLite to PostgreSQL, or the Agents SDK's layout to this package's (sdk+redis://...).
    Sessions keep their item numbers and times; run it again after an interruption to complete
    what is missing (copied sessions are skipped). Each session is verified by its item count.
    """
    both = _parse_options(option)
    src_opts = {**both, **_parse_options(src_option)}
    dst_opts = {**both, **_parse_options(dst_option)}
    if _store_identity(src_url, src_opts) == _store_identity(dst_url, dst_opts):
        base = src_url.split("://")[0].lower().removeprefix("sdk+").split("+")[0]
        other = {
            "sqlite": "another file",
            "redis": "another database number or --dst-option key_prefix=...",
            "rediss": "another database number or --dst-option key_prefix=...",
            "mongodb": "another database",
        }.get(base, "another database or --dst-option table_prefix=...")
        _fail(
            f"{src_url} is both the source and the destination; a copy onto itself "
            f"would change nothing or, with --replace, erase what it reads. Name {other}"
        )
    _confirm(f"Overwrite sessions in {dst_url} that hold other items?", yes or not replace)

    from ..ops.migrate import copy_store

    chosen = _named(src_url, [*(option or []), *(src_option or [])], session_ids, prefix)
    _report(
        _metered(
            "copying",
            quiet,
            lambda meter: copy_store(
                src_url,
                dst_url,
                session_ids=chosen,
                src_options=src_opts,
                dst_options=dst_opts,
                replace=replace,
                side_stores=side_stores,
                batch=batch,
                plan=meter.plan,
                on_session=meter.session,
                renumber=renumber,
            ),
        ),
        "copied",
        as_json,
    )


@app.command()
def clear(
    url: Url,
    session_id: Annotated[str, typer.Argument(help="the session to empty")],
    yes: Yes = False,
    as_json: Json = False,
    option: Options = None,
) -> None:
    """Delete every item of one session (its side stores stay; see `delete` to erase all)."""

    async def empty(store: Any) -> None:
        if store.catalog is not None:
            await store.catalog.require(session_id)
        _confirm(f"Delete every item of session {session_id!r}?", yes)
        async with store.opened(session_id) as session:
            await session.clear_session()

    _in_store(url, option, empty)
    typer.echo(_json({"cleared": session_id}) if as_json else f"cleared {session_id!r}")


@app.command()
def delete(
    url: Url,
    session_ids: DeleteIds = None,
    prefix: Prefix = None,
    all_sessions: Annotated[bool, _opt("delete every session of the store", "--all")] = False,
    user: Annotated[
        str | None,
        _opt(
            "erase a user everywhere: the sessions tagged with this user_id, the user's memory "
            "scopes (memory:*:USER) and other scopes' recall entries of those sessions",
            "--user",
        ),
    ] = None,
    dry_run: Annotated[
        bool, _opt("with --user: list what would be erased; change nothing", "--dry-run")
    ] = False,
    yes: Yes = False,
    as_json: Json = False,
    option: Options = None,
) -> None:
    """Erase sessions with everything layers keep for them (a GDPR erase).

    Name the ids, or select them with --prefix, or pass --all; --user erases a user everywhere.
    """
    if user is not None:
        if session_ids or prefix or all_sessions:
            raise typer.BadParameter("--user selects by itself: drop the ids, --prefix and --all")
        return _delete_user(url, user, dry_run, yes, as_json, option)
    if dry_run:
        raise typer.BadParameter("--dry-run goes with --user", param_hint="--dry-run")
    if not session_ids and not prefix and not all_sessions:
        raise typer.BadParameter("name session ids, or pass --prefix, --all or --user")

    async def erase(store: Any) -> int:
        catalog = store.require_catalog()
        ids = await _chosen(store, session_ids, prefix)
        if not ids:
            return 0
        _confirm(
            f"Erase {len(ids)} session(s) ({_names(map(_shown, ids))}) and their side stores "
            f"from {url}?",
            yes,
        )
        deleted = 0
        _INTERRUPTED.append(
            lambda: (
                f"erased {deleted} of {len(ids)} session(s) before the interruption; run the "
                "same command again to erase the rest"
            )
        )
        for start in range(0, len(ids), 100):
            deleted += await catalog.delete_sessions(ids[start : start + 100])
        if all_sessions:
            await catalog.erase_all()  # side stores no family lists any more
        return deleted

    deleted = _in_store(url, option, erase)
    typer.echo(
        _json({"deleted": deleted})
        if as_json
        else f"deleted {deleted} session(s) with their side stores"
    )


def _delete_user(
    url: str, user: str, dry_run: bool, yes: bool, as_json: bool, option: list[str] | None
) -> None:
    """``delete --user``: erase (or, ``dry_run``, list) everything of ``user``."""
    from ..ops.users import erase_user

    async def go(store: Any) -> Any:
        catalog = store.require_catalog()
        plan = await erase_user(catalog, user, dry_run=True)
        found = plan.sessions or plan.memory_scopes or plan.recall
        if dry_run or not found:
            return plan
        _confirm(
            f"Erase user {user!r} from {url}: {len(plan.sessions)} session(s), "
            f"{len(plan.memory_scopes)} memory scope(s) and their recall entries in "
            f"{len(plan.recall)} other scope(s)?",
            yes,
        )
        return await erase_user(catalog, user)

    done = _in_store(url, option, go)
    done.memory_scopes = [_shown(scope) for scope in done.memory_scopes]
    done.recall = {_shown(scope): sids for scope, sids in done.recall.items()}
    if as_json:
        return typer.echo(_json(done.as_dict()))
    verb = "would erase" if dry_run else "erased"
    for sid in done.sessions:
        typer.echo(f"{verb} session {sid!r}")
    for scope in done.memory_scopes:
        typer.echo(f"{verb} memory scope {scope!r}")
    for scope, sids in done.recall.items():
        typer.echo(f"{verb} the recall entries of {_names(sids)} in memory scope {scope!r}")
    typer.echo(
        f"{'dry run: ' if dry_run else ''}{verb} {len(done.sessions)} session(s), "
        f"{len(done.memory_scopes)} memory scope(s) and recall entries in "
        f"{len(done.recall)} other scope(s) of user {user!r}"
    )


async def _ttl_skip_reason(store: Any, sid: str, family_clock: bool) -> str | None:
    """None when ``sid`` was written through TTLSession, else why purge must leave it."""
    from ..core.ids import derive_sibling_id
    from ..wrappers.ttl import TTL_TYPE
    from ..wrappers.ttl.family import PURPOSE

    async with store.opened(sid) as session:
        newest = await session.get_items(1)
    kind = _type(newest[0]) if newest else TTL_TYPE
    if kind == "agent_sessions.enc":
        # TTLSession over EncryptedSession: the stamps are encrypted, so only the app can tell
        return "its items are encrypted (call TTLSession.purge_expired() in the app)"
    if kind != TTL_TYPE:
        return "its items are not TTLSession envelopes"
    if family_clock:
        async with store.opened(derive_sibling_id(sid, PURPOSE)) as records:
            if not await records.get_items(1):
                return "its family has no TTL lifecycle record"
    return None


@app.command()
def purge(
    url: Url,
    session_ids: Ids = None,
    ttl: Ttl = None,
    absolute: Absolute = False,
    item_ttl: ItemTtl = None,
    prefix: Prefix = None,
    keep_empty: Annotated[
        bool, _opt("keep sessions the purge emptied (default: erase them, side stores too)")
    ] = False,
    dry_run: Annotated[
        bool, _opt("print what would be removed; change nothing", "--dry-run")
    ] = False,
    yes: Yes = False,
    as_json: Json = False,
    option: Options = None,
) -> None:
    """Physically remove expired items of sessions written through TTLSession.

    Only sessions with a TTL lifecycle record (TTLSession(ttl=...)) or, with --item-ttl alone,
    TTLSession envelopes are purged; others are skipped and counted. A session left empty is
    erased with its side stores (unless --keep-empty).
    """
    if ttl is None and item_ttl is None:
        raise typer.BadParameter(
            "purge needs --ttl and/or --item-ttl, the values the app uses", param_hint="--ttl"
        )
    plan: dict[str, int] = {}  # the purge's sessions: how many items would go
    done: dict[str, int] = {}
    _INTERRUPTED.append(
        lambda: (
            f"purged {sum(done.values())} item(s) from {len(done)} session(s) before the "
            "interruption; run the same command again to purge the rest"
        )
    )

    async def go(store: Any) -> tuple[dict[str, int], list[str], dict[str, str]]:
        skipped: dict[str, str] = {}
        for sid in await _chosen(store, session_ids, prefix):
            if (reason := await _ttl_skip_reason(store, sid, ttl is not None)) is not None:
                skipped[sid] = reason
            else:
                plan[sid] = 0

        # Erasing needs the catalog: a store that cannot list keeps the sessions it empties.
        erasing = not keep_empty and store.catalog is not None

        async def purge_all(counts: dict[str, int], dry: bool) -> list[str]:
            """Purge (``dry``: count) each planned session; return those left empty that are
            to be erased."""
            emptied = []
            for sid in plan:
                async with store.opened(sid) as inner:
                    session = _ttl_session(inner, (ttl, item_ttl, absolute))
                    counts[sid] = await session.purge_expired(dry_run=dry)
                    if (
                        erasing
                        and counts[sid]
                        and not await (
                            session.get_items(1) if dry else inner.count_items()  # nothing left
                        )
                    ):
                        emptied.append(sid)
            return emptied

        emptied = await purge_all(plan, True)
        if dry_run or not sum(plan.values()):
            return plan, emptied, skipped
        going = {sid: n for sid, n in plan.items() if n}
        erase = (
            ""
            if not emptied
            else (
                f" and erase {len(emptied)} session(s) left empty ({_names(emptied)}) with "
                "their side stores"
            )
        )
        _confirm(
            f"Remove {sum(going.values())} expired item(s) from {len(going)} TTL "
            f"session(s) ({_names(going)}) in {url}{erase}? "
            f"{len(skipped)} session(s) not written through TTLSession are skipped.",
            yes,
        )
        emptied = await purge_all(done, False)
        if emptied:
            await store.require_catalog().delete_sessions(emptied)
        return done, emptied, skipped

    removed, erased, skipped = _in_store(url, option, go)
    verb = "would remove" if dry_run else "removed"
    if as_json:
        return typer.echo(
            _json(
                {
                    "dry_run": dry_run,
                    "sessions": len(removed),
                    "removed": sum(removed.values()),
                    "by_session": {sid: n for sid, n in removed.items() if n},
                    "erased": erased,
                    "skipped": len(skipped),
                    "skipped_ids": sorted(skipped),
                }
            )
        )
    for sid, n in removed.items():
        if n or session_ids:
            erase = "would be erased" if dry_run else "erased"
            gone = f" (left empty: {erase} with its side stores)" if sid in erased else ""
            typer.echo(f"{sid}: {verb} {n} expired item(s){gone}")
    for sid, reason in skipped.items():
        if session_ids or dry_run:
            typer.echo(f"{sid}: skipped, {reason}")
    typer.echo(
        f"{'dry run: ' if dry_run else ''}{verb} {sum(removed.values())} item(s) from "
        f"{len(removed)} TTL session(s); {len(skipped)} session(s) not written through "
        "TTLSession skipped"
    )


@app.command()
def demo(
    db: Annotated[
        str | None, _opt("SQLite file to use (default: a temporary file, removed at the end)")
    ] = None,
    keep: Annotated[bool, _opt("keep the temporary file and say where it is", "--keep")] = False,
    live: Annotated[bool, _opt("use a real model (needs OPENAI_API_KEY)")] = False,
    model: Annotated[str, _opt("model for --live")] = "gpt-4.1-mini",
) -> int:
    """Run a conversation, undo a wrong turn and re-ask (offline unless --live)."""
    from .demo import run_demo

    return asyncio.run(run_demo(db, live, model, sys.stdout, keep))
