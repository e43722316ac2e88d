"""The compaction record: the newest one in the side store is in force, and the view is its
``summary`` followed by the inner items after its ``boundary``."""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import BackendDataError

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

RECORD_TYPE = "agent_sessions.compaction"
RECORD_VERSION = 1


@dataclass(frozen=True)
class CompactionRecord:
    """One committed state of the compacted view.

    Attributes:
        boundary: the sequence number up to which the inner history is archived.
        summary: the items that stand for the archived part.
        archived: how many original items the summary covers in total.
        summarizer: name of the summarizer that produced ``summary``.
        reason: ``"compaction"``, or ``"pop"`` when ``pop_item`` removed a summary item.
        created_at: Unix time of the commit.
        id: unique id of this record.
    """

    boundary: int
    summary: list[TResponseInputItem]
    archived: int
    summarizer: str
    reason: str = "compaction"
    created_at: float = field(default_factory=time.time)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def to_item(self) -> dict[str, Any]:
        """The JSON object stored in the sibling session."""
        return {"type": RECORD_TYPE, "version": RECORD_VERSION, **asdict(self)}

    @classmethod
    def from_item(cls, item: Any, where: str) -> CompactionRecord:
        """Parse a stored record; raise BackendDataError when it is not one of ours."""
        try:
            if item.get("type") != RECORD_TYPE or item.get("version") != RECORD_VERSION:
                raise ValueError("not a compaction record of this version")
            summary = item["summary"]
            if not isinstance(summary, list) or not all(isinstance(i, dict) for i in summary):
                raise ValueError("summary is not a list of items")
            return cls(
                boundary=int(item["boundary"]),
                summary=summary,
                archived=int(item["archived"]),
                summarizer=str(item.get("summarizer", "")),
                reason=str(item.get("reason", "compaction")),
                created_at=float(item.get("created_at", 0.0)),
                id=str(item["id"]),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BackendDataError(
                f"{where} holds an item that is not a compaction record ({exc}); "
                "it must only be written by CompactionSession"
            ) from exc
