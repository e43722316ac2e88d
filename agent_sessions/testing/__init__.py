"""Test kit: the conformance suite in tiers and helpers for ScriptedModel-driven tests.

Importing it needs pytest and pytest-asyncio (the ``[testing]`` extra).
"""

from .conformance import (
    HOSTILE_ID_SUFFIXES,
    CheckedPopConformance,
    CoreConformance,
    FamilyBatchConformance,
    FamilyConformance,
    GuardedWriteConformance,
    RangeDeleteConformance,
    RewriteConformance,
    SDKCompactionConformance,
    SequencedWriteConformance,
    SequencingConformance,
    SessionConformanceSuite,
    StrictConformance,
)
from .helpers import item_text, model_input_texts, scripted_agent, texts
from .store import StoreConformance

__all__ = [
    "HOSTILE_ID_SUFFIXES",
    "CheckedPopConformance",
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
    "item_text",
    "model_input_texts",
    "scripted_agent",
    "texts",
]
