"""``Memory``: one scope's blocks, recall index and archive, kept as side stores of a root
session in the same store as the conversations (so the catalog erases them with it)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents.memory import Session

from ..core.family import close_quietly, side_store
from ..core.registry import open_session
from ..errors import MemoryEditError
from .archival import Archive
from .blocks import Block, Blocks, is_near_limit, shown
from .embedders import Embedder
from .recall import RecallIndex, RecallSession
from .tools import memory_tools

log = logging.getLogger(__name__)
_PART = re.compile(r"[A-Za-z0-9_.@+\-]{1,100}\Z")


def scope_id(agent_id: str | None = None, user_id: str | None = None) -> str:
    """The root session id of a memory scope: ``memory:<agent_id>:<user_id>`` (either part
    may be empty, not both)."""
    parts = []
    for name, value in (("agent_id", agent_id), ("user_id", user_id)):
        if value is not None and (not isinstance(value, str) or not _PART.match(value)):
            raise MemoryEditError(
                f"{name} must be 1-100 characters A-Z a-z 0-9 _ . @ + -, got {value!r}; "
                "hash other identifiers first"
            )
        parts.append(value or "")
    if not any(parts):
        raise MemoryEditError("a memory scope needs an agent_id, a user_id or both")
    return "memory:" + ":".join(parts)


def render_blocks(blocks: list[Block]) -> str:
    """The blocks as prompt text: each with its size, limit and read-only flag; values and
    descriptions as stored but for a backslash after ``<`` in ``</`` and ``<\\``
    (``blocks.shown``), so a value cannot close its own tag and the model can quote it back."""
    out = [
        "<memory_blocks>",
        "Your core memory. You always see it; edit it with memory_insert, memory_replace "
        "and memory_rethink (read_only blocks cannot be edited). Search past conversations "
        "with conversation_search and stored facts with archival_memory_search.",
    ]
    for b in blocks:
        near = (
            ' warning="near its limit: shorten it with memory_rethink"' if is_near_limit(b) else ""
        )
        out.append(
            f'<{b.label} chars="{len(b.value)}" limit="{b.limit}" '
            f'read_only="{str(b.read_only).lower()}"{near}>'
        )
        if b.description:
            out.append(f"<description>{shown(b.description)}</description>")
        out.append(f"<value>\n{shown(b.value)}\n</value>")
        out.append(f"</{b.label}>")
    out.append("</memory_blocks>")
    return "\n".join(out)


@dataclass(frozen=True)
class Tidied:
    """What one ``Memory.tidy`` did."""

    deduped: list[str]
    """Ids of passages superseded by a newer one with the same words."""
    expired: list[str]
    """Ids of passages newly marked expired (past ``valid_to``)."""
    near_limit: list[Block]
    """Writable blocks at least 90% full (each also logged as a warning)."""
    reembedding: asyncio.Task[int] | None
    """The background re-embedding started (or already running), when some passage has no
    vector of the current embedder."""


class Memory:
    """Long-term memory of one scope (agent and/or user), over ``root``: a session of any
    store of this package that keeps a family (``Memory.open`` makes one from a URL).

    ``blocks``, ``recall`` and ``archive`` are side stores of ``root``'s family, so erasing
    the root through the catalog erases all of it, and two scopes never share a store.
    """

    def __init__(
        self,
        root: Session,
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.clock = clock
        self.blocks = Blocks(side_store(root, "memory.blocks"), clock)
        self.recall = RecallIndex(
            side_store(root, "memory.recall"),
            clock,
            marks=side_store(root, "memory.recall.marks"),
            snapshots=side_store(root, "memory.recall.snapshots"),
        )
        self.archive = Archive(side_store(root, "memory.archive"), embedder, clock)
        self.upkeep_store = side_store(root, "memory.upkeep")

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        embedder: Embedder | None = None,
        **options: Any,
    ) -> Memory:
        """Open the memory of a scope in the store at ``url`` (``options`` go to the store)."""
        root = await open_session(url, scope_id(agent_id, user_id), **options)
        return cls(root, embedder=embedder)

    def session(self, inner: Session) -> RecallSession:
        """``inner`` wrapped so every item written through it is indexed for recall (an
        encrypted ``inner`` over a plain root is refused: MemoryEditError)."""
        return RecallSession(inner, self.recall)

    def instructions(self, prompt: str = "") -> Callable[[Any, Any], Awaitable[str]]:
        """A dynamic ``instructions`` for an SDK ``Agent``: ``prompt``, then the blocks as
        they are before each model call (the static part first keeps prompt caching)."""

        async def render(_context: Any, _agent: Any) -> str:
            body = render_blocks(await self.blocks.all())
            return f"{prompt}\n\n{body}" if prompt else body

        return render

    def tools(self) -> list[Any]:
        """The memory tools bound to this scope (see ``agent_sessions.memory.tools``)."""
        return memory_tools(self)

    async def tidy(self) -> Tidied:
        """Run the model-free upkeep jobs (each also callable alone): ``archive.dedupe``,
        ``archive.expire``, ``blocks.near_limit`` (logged), and ``archive.
        reembed_in_background`` when some passage lacks a vector of the current embedder
        (not awaited here: await or cancel the returned task)."""
        deduped = await self.archive.dedupe()
        expired = await self.archive.expire()
        near = await self.blocks.near_limit()
        for block in near:
            log.warning(
                "memory block %r of %s is %d of %d characters: near its limit",
                block.label,
                self.root.session_id,
                len(block.value),
                block.limit,
            )
        embedder = self.archive.embedder
        stale = embedder is not None and any(
            p.embedder != embedder.name for p in self.archive.passages
        )
        reembedding = self.archive.reembed_in_background() if stale else None
        return Tidied(deduped, expired, near, reembedding)

    async def close(self) -> None:
        """Close the root session (its side stores close with it)."""
        await close_quietly(self.root)

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
