"""The memory tools for an SDK ``Agent``, with Letta's names and arguments. A refused edit
or bad argument comes back to the model as text saying how to fix it; the run goes on."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from agents import FunctionTool, function_tool

from ..errors import MemoryEditError
from .archival import MAX_TAG, MAX_TAGS, Archive
from .blocks import Block, Blocks, unshown
from .recall import RecallIndex, epoch

DAY = 86_400.0
OUTPUT_CHARS = 16_000
"""About how much passage text one archival_memory_search returns, shared by its results (a
passage stored before the size limits existed could flood every search)."""


class MemoryParts(Protocol):
    """What the tools use of a ``Memory`` (so this module does not import ``core``)."""

    blocks: Blocks
    recall: RecallIndex
    archive: Archive


def _bound(value: str | None, name: str, *, end: bool = False) -> float | None:
    at = epoch(value, name)
    if at is not None and end and value is not None and len(value) == 10:
        at += DAY  # a date alone as the end includes that whole day
    return at


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


async def _answer(work: Callable[[], Awaitable[str]]) -> str:
    try:
        return await work()
    except (MemoryEditError, ValueError) as exc:
        return f"Error: {exc}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _edited(block: Block) -> str:
    return (
        f"Block '{block.label}' is now version {block.version} "
        f"({len(block.value)} of {block.limit} characters)."
    )


def memory_tools(memory: MemoryParts) -> list[FunctionTool]:
    """The seven tools, bound to ``memory``."""
    blocks, recall, archive = memory.blocks, memory.recall, memory.archive
    shared: Sequence[Blocks] = getattr(memory, "shared", ())  # Memory's; optional elsewhere

    async def _edit(label: str, pending: Callable[[], Awaitable[Block]]) -> str:
        try:
            return _edited(await pending())
        except MemoryEditError:
            own = {b.label for b in await blocks.all()}
            for other in shared if label not in own else ():
                if label in {b.label for b in await other.all()}:
                    raise MemoryEditError(
                        f"block '{label}' is shared with other agents and read-only for you: "
                        "you cannot change it; keep the information elsewhere (one of your "
                        "own blocks or archival_memory_insert)"
                    ) from None
            raise

    def _keyword_only() -> str:
        return (
            f"The embedding service failed ({archive.outage}), so archival search matches "
            "keywords only for now: use words the fact would contain."
        )

    async def memory_insert(label: str, new_str: str, insert_line: int = -1) -> str:
        """Insert text into a memory block.

        Args:
            label: The block to edit, e.g. "human".
            new_str: The text to insert.
            insert_line: Insert after this line (0 inserts at the top, -1 at the end).
        """
        return await _answer(
            lambda: _edit(label, lambda: blocks.insert(label, unshown(new_str), insert_line))
        )

    async def memory_replace(label: str, old_str: str, new_str: str) -> str:
        """Replace text in a memory block; old_str must occur exactly once.

        Args:
            label: The block to edit.
            old_str: The exact text to replace, copied from the block.
            new_str: The replacement ("" deletes old_str).
        """
        return await _answer(
            lambda: _edit(label, lambda: blocks.replace(label, unshown(old_str), unshown(new_str)))
        )

    async def memory_rethink(label: str, new_memory: str) -> str:
        """Rewrite a whole memory block (to reorganise or shorten it).

        Args:
            label: The block to rewrite.
            new_memory: The complete new value of the block.
        """
        return await _answer(
            lambda: _edit(label, lambda: blocks.rethink(label, unshown(new_memory)))
        )

    async def memory_finish_edits() -> str:
        """Call when you are done editing memory."""
        return "Memory edits finished."

    async def conversation_search(
        query: str,
        roles: list[str] | None = None,
        limit: int = 5,
        start_date: str | None = None,
        end_date: str | None = None,
    ) -> str:
        """Search everything said in past conversations (also what was summarised away).

        Args:
            query: Words to look for.
            roles: Only these roles, e.g. ["user"] or ["assistant", "tool"].
            limit: At most this many results.
            start_date: Only from this ISO date or time on, e.g. "2026-12-01".
            end_date: Only up to this ISO date (inclusive) or time.
        """

        async def work() -> str:
            hits = await recall.search(
                query,
                roles=roles,
                limit=max(1, min(limit, 50)),
                start=_bound(start_date, "start_date"),
                end=_bound(end_date, "end_date", end=True),
            )
            if not hits:
                return f"No past messages match {query!r}."
            return json.dumps(
                [
                    {
                        "session": h.session_id,
                        "seq": h.seq,
                        "role": h.role,
                        "time": _iso(h.at),
                        "text": h.snippet(),
                    }
                    for h in hits
                ],
                ensure_ascii=False,
            )

        return await _answer(work)

    async def archival_memory_insert(content: str, tags: list[str] | None = None) -> str:
        """Store a fact in archival memory for later search.

        Args:
            content: The fact, self-contained.
            tags: Optional tags, e.g. ["preference"].
        """

        async def work() -> str:
            passage = await archive.insert(content, tags)
            if archive.outage is not None and passage.packed is None:
                return (
                    f"Stored passage {passage.id}. The embedding service failed "
                    f"({archive.outage}), so for now it is found by keyword search only; it "
                    "is embedded later."
                )
            return f"Stored passage {passage.id}."

        return await _answer(work)

    async def archival_memory_search(
        query: str,
        tags: list[str] | None = None,
        tag_match_mode: Literal["any", "all"] = "any",
        top_k: int = 5,
        start_datetime: str | None = None,
        end_datetime: str | None = None,
    ) -> str:
        """Search archival memory by keywords and meaning.

        Args:
            query: What to look for.
            tags: Only passages with these tags.
            tag_match_mode: "any" (at least one tag) or "all".
            top_k: At most this many results.
            start_datetime: Only passages stored from this ISO time on.
            end_datetime: Only passages stored up to this ISO time.
        """

        async def work() -> str:
            found = await archive.search(
                query,
                tags=tags,
                tag_match_mode=tag_match_mode,
                top_k=max(1, min(top_k, 50)),
                start=_bound(start_datetime, "start_datetime"),
                end=_bound(end_datetime, "end_datetime", end=True),
            )
            note = "" if archive.outage is None else _keyword_only() + "\n"
            if not found:
                return f"{note}No archived passages match {query!r}."
            width = max(500, OUTPUT_CHARS // len(found))
            return note + json.dumps(
                [
                    {
                        "id": p.id,
                        "content": _cut(p.content, width),
                        "tags": [_cut(t, MAX_TAG) for t in p.tags[:MAX_TAGS]],
                        "time": _iso(p.at),
                    }
                    for p in found
                ],
                ensure_ascii=False,
            )

        return await _answer(work)

    functions: list[Callable[..., Any]] = [
        memory_insert,
        memory_replace,
        memory_rethink,
        memory_finish_edits,
        conversation_search,
        archival_memory_insert,
        archival_memory_search,
    ]
    return [function_tool(f) for f in functions]
