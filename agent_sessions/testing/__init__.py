"""The conformance kit: the behavioural contract every session of this package passes, in tiers,
and helpers for ScriptedModel-driven tests. Third-party backends can pass it too.

Subclass :class:`SessionConformanceSuite` (every tier) or only the tiers your session claims, and
implement ``create_session``::

    from agent_sessions.testing import SessionConformanceSuite

    class TestMyBackend(SessionConformanceSuite):
        async def create_session(self, session_id):
            return MyBackendSession(session_id, url=...)

Tiers: :class:`CoreConformance` (the SDK's semantics), :class:`StrictConformance` (validation,
size caps, concurrency, cancellation) and one class per capability, which skips sessions that do
not declare it. Needs pytest and pytest-asyncio (the ``[testing]`` extra). Each test gets fresh,
random session ids and clears and closes what it created.
"""

from .base import HOSTILE_ID_SUFFIXES
from .capability_tiers import (
    CheckedPopConformance,
    CommitConformance,
    GuardedWriteConformance,
    RangeDeleteConformance,
    RewriteConformance,
    SDKCompactionConformance,
    SequencedWriteConformance,
    SequencingConformance,
)
from .core_tier import CoreConformance
from .family_tiers import FamilyBatchConformance, FamilyConformance
from .helpers import item_text, model_input_texts, scripted_agent, texts
from .store import StoreConformance
from .strict_tier import StrictConformance
from .text_search_tier import TextSearchConformance


class SessionConformanceSuite(
    CoreConformance,
    StrictConformance,
    SequencingConformance,
    RangeDeleteConformance,
    RewriteConformance,
    FamilyConformance,
    SequencedWriteConformance,
    FamilyBatchConformance,
    GuardedWriteConformance,
    CommitConformance,
    CheckedPopConformance,
    SDKCompactionConformance,
    TextSearchConformance,
):
    """Every tier. Override ``create_session``; tune ``max_item_bytes``/``concurrent_tasks``."""


__all__ = [
    "HOSTILE_ID_SUFFIXES",
    "CheckedPopConformance",
    "CommitConformance",
    "CoreConformance",
    "FamilyBatchConformance",
    "FamilyConformance",
    "GuardedWriteConformance",
    "RangeDeleteConformance",
    "RewriteConformance",
    "SDKCompactionConformance",
    "SequencedWriteConformance",
    "SequencingConformance",
    "SessionConformanceSuite",
    "StoreConformance",
    "StrictConformance",
    "TextSearchConformance",
    "item_text",
    "model_input_texts",
    "scripted_agent",
    "texts",
]
