"""Every ``python`` code block of the README and docs/ runs, in page order.

Blocks of one page share a namespace and an event loop (top-level ``await`` works), in a
fresh working directory. The namespace starts with ``agent`` (an offline agent on
``agents.testing.ScriptedModel``) and ``Runner``, which snippets use as "your agent".

A block that cannot run here says so just above its fence, and is reported as skipped with
that reason (never silently):

- ``<!-- docs-test: skip: REASON -->``: not a program (a signature, an outline with names
  the reader supplies, placeholder hosts).
- ``<!-- docs-test: needs: redis -->`` (or ``postgres``, ``mariadb``): runs against the local
  server; skipped when it is missing (failed under CI=true, like every server test).
- ``<!-- docs-test: needs: mongodb -->``: runs when AGENT_SESSIONS_MONGODB_URL is set.
- ``<!-- docs-test: needs: openai -->``: runs when OPENAI_API_KEY is set (a live model).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.servers import RUN, require_server

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(
    r"^(?:<!--\s*docs-test:\s*(?P<marker>.*?)\s*-->\s*\n(?:[ \t]*\n)*)?"
    r"```python[^\n]*\n(?P<code>.*?)^```",
    re.M | re.S,
)
_SERVERS = {"redis": 6379, "postgres": 5432, "mariadb": 3306}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str
    marker: str | None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            out.append(Block(page, line, match.group("code"), match.group("marker")))
    return out


BLOCKS = _blocks()


def _prelude() -> dict[str, Any]:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message

    set_tracing_disabled(True)  # offline: nowhere to export traces to
    model = ScriptedModel([[assistant_message(f"reply {i}")] for i in range(200)])
    agent = Agent(name="assistant", instructions="Reply briefly.", model=model)
    return {"__name__": "__docs__", "agent": agent, "Runner": Runner}


@dataclass
class PageState:
    namespace: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    cwd: str


_pages: dict[Path, PageState] = {}


def _state(page: Path) -> PageState:
    state = _pages.get(page)
    if state is None:
        state = _pages[page] = PageState(
            _prelude(), asyncio.new_event_loop(), tempfile.mkdtemp(prefix="docs-test-")
        )
    return state


def _obey(block: Block) -> None:
    marker = block.marker
    if marker is None:
        return
    kind, _, arg = marker.partition(":")
    kind, arg = kind.strip(), arg.strip()
    if kind == "skip":
        assert arg, "a docs-test skip marker needs a reason: <!-- docs-test: skip: why -->"
        pytest.skip(f"{block.id}: {arg}")
    assert kind == "needs", f"unknown docs-test marker {marker!r}"
    if arg in _SERVERS:
        require_server(arg, "127.0.0.1", _SERVERS[arg])
    elif arg == "mongodb":
        if not os.environ.get("AGENT_SESSIONS_MONGODB_URL"):
            pytest.skip(f"{block.id}: needs a MongoDB server (set AGENT_SESSIONS_MONGODB_URL)")
    elif arg == "openai":
        if not os.environ.get("OPENAI_API_KEY"):
            pytest.skip(f"{block.id}: needs a live model (set OPENAI_API_KEY)")
    else:
        raise AssertionError(f"unknown docs-test requirement {arg!r}")


@pytest.fixture(scope="module", autouse=True)
def _tagged_redis_prefixes() -> Iterator[None]:
    """Pages name their sessions (``user-42``); their Redis key prefixes get the test run's
    tag appended, so the run's guard (tests/conftest.py) removes what the pages leave (a
    cleared session keeps its counter) and a concurrent run's pages never meet them."""
    from agent_sessions.backends.redis import RedisSession

    init = RedisSession.__init__
    default = inspect.signature(init).parameters["key_prefix"].default

    def tagged(self: RedisSession, *args: Any, key_prefix: str = default, **kw: Any) -> None:
        init(self, *args, key_prefix=f"{key_prefix}{RUN}", **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RedisSession, "__init__", tagged)
        yield


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_docs_block_runs(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    _obey(block)
    state = _state(block.page)
    monkeypatch.chdir(state.cwd)
    code = compile(
        block.code, f"{block.id}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    if code.co_flags & inspect.CO_COROUTINE:
        state.loop.run_until_complete(eval(code, state.namespace))
    else:
        exec(code, state.namespace)
    if block is [b for b in BLOCKS if b.page == block.page][-1]:
        _close_page(state)


def _close_page(state: PageState) -> None:
    """Close what the page left open (sessions), then its loop."""

    async def close_all() -> None:
        for value in list(state.namespace.values()):
            close = getattr(value, "close", None)
            if close is not None and hasattr(value, "get_items") and not isinstance(value, type):
                result = close()
                if inspect.isawaitable(result):
                    await result

    state.loop.run_until_complete(close_all())
    state.loop.close()


def test_every_page_with_python_blocks_is_found() -> None:
    assert any(b.page.name == "README.md" for b in BLOCKS)
    assert len({b.page for b in BLOCKS}) >= 5


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_names_every_session_class_and_links_every_page() -> None:
    import agent_sessions

    readme = (ROOT / "README.md").read_text()
    features = _section(readme, "Features")
    public = {n for n in agent_sessions.__all__ if n.endswith("Session")}
    internal = {"BaseSession", "AsyncSQLiteSession"}  # the backend template; the SDK's alias
    assert sorted(n for n in public - internal if f"`{n}`" not in features) == []
    linked = set(re.findall(r"\]\(docs/([\w./-]+\.md)\)", _section(readme, "Documentation")))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md", "changelog.md"}
    assert sorted(pages - linked) == []


def test_api_reference_renders_no_sphinx_roles() -> None:
    """mkdocstrings prints a ``:class:`X``` role as is; the site's griffe extension turns each
    into a code span (docstrings keep the roles for ``help()`` and IDEs)."""
    import griffe

    from scripts.griffe_roles import ROLE, SphinxRoles

    assert "scripts/griffe_roles.py:SphinxRoles" in (ROOT / "mkdocs.yml").read_text()
    package = griffe.load(
        "agent_sessions", search_paths=[str(ROOT)], extensions=griffe.load_extensions(SphinxRoles())
    )
    left: list[str] = []
    todo: list[griffe.Object | griffe.Alias] = [package]
    while todo:
        obj = todo.pop()
        if obj.is_alias:
            continue
        if obj.docstring is not None and ROLE.search(obj.docstring.value):
            left.append(obj.path)
        todo.extend(obj.members.values())
    assert left == []


def test_the_site_lists_each_page_once() -> None:
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    pages = re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, re.M)
    assert sorted({p for p in pages if pages.count(p) > 1}) == []
