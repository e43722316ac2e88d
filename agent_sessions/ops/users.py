"""Erase a user everywhere in one store: the sessions tagged with their ``user_id``
(``SessionCatalog.tag``), their memory scopes (``memory:*:<user_id>``) and the recall entries
that other scopes indexed from their sessions::

    async with await SessionCatalog.open("sqlite:///app.db") as catalog:
        plan = await erase_user(catalog, "ada", dry_run=True)
        await erase_user(catalog, "ada")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.family import close_quietly
from ..memory.core import Memory
from .catalog import SessionCatalog, check_tags, memory_scopes, memory_scopes_of_user


@dataclass
class UserErasure:
    """What an erase of one user removed (or, on a dry run, would remove)."""

    user_id: str
    sessions: list[str] = field(default_factory=list)
    """The sessions tagged with the user, erased with their families."""
    memory_scopes: list[str] = field(default_factory=list)
    """The user's memory scopes, erased with all their side stores."""
    recall: dict[str, list[str]] = field(default_factory=dict)
    """Other scopes' recall entries: scope id -> the user's sessions forgotten there."""
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The erasure as JSON-ready values."""
        return {
            "user_id": self.user_id,
            "dry_run": self.dry_run,
            "sessions": self.sessions,
            "memory_scopes": self.memory_scopes,
            "recall": self.recall,
        }


async def _indexed(catalog: SessionCatalog, scope: str, sessions: set[str]) -> list[str]:
    """Those of ``sessions`` whose items the recall log of ``scope`` still holds."""
    memory = Memory(catalog.session.sibling(scope))  # type: ignore[attr-defined]
    try:
        records: list[Any] = list(await memory.recall.store.get_items())
    finally:
        await close_quietly(memory.root)
    return sorted(
        {
            r["session"]
            for r in records
            if isinstance(r, dict)
            and r.get("kind") == "recall"
            and r.get("session") in sessions
            and r.get("text")
        }
    )


async def erase_user(
    catalog: SessionCatalog, user_id: str, *, dry_run: bool = False
) -> UserErasure:
    """Erase ``user_id``'s tagged sessions, memory scopes and the recall entries other scopes
    indexed from those sessions (``dry_run``: only find them). Recall entries go first, so an
    interrupted erase run again finds the rest. Stop the user's writers first: a write racing
    the erase may survive it.

    Raises:
        InvalidTagError: ``user_id`` is not a valid user id.
    """
    check_tags(user_id, None, None)
    out = UserErasure(user_id, dry_run=dry_run)
    out.sessions = [info.session_id async for info in catalog.tagged(user_id=user_id)]
    out.memory_scopes = await memory_scopes_of_user(catalog, user_id)
    mine = set(out.sessions)
    for scope in await memory_scopes(catalog) if mine else []:
        if scope not in out.memory_scopes and (found := await _indexed(catalog, scope, mine)):
            out.recall[scope] = found
    if dry_run:
        return out
    for scope, sessions in out.recall.items():
        memory = Memory(catalog.session.sibling(scope))  # type: ignore[attr-defined]
        try:
            for sid in sessions:
                await memory.recall.forget(sid)
        finally:
            await close_quietly(memory.root)
    await catalog.delete_sessions(out.sessions + out.memory_scopes)
    return out


__all__ = ["UserErasure", "erase_user"]
