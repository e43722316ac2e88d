"""The compaction layer: an old part of a history replaced by a summary, the originals kept."""

from .records import CompactionRecord
from .session import CompactionResult, CompactionSession
from .summarizers import (
    AgentSummarizer,
    ExtractiveSummarizer,
    ResponsesCompactionSummarizer,
    Summarizer,
)
from .tokens import TokenEstimator
from .trigger import (
    CompactionTrigger,
    CompactionTriggerContext,
    item_count_trigger,
    token_threshold_trigger,
)

__all__ = [
    "AgentSummarizer",
    "CompactionRecord",
    "CompactionResult",
    "CompactionSession",
    "CompactionTrigger",
    "CompactionTriggerContext",
    "ExtractiveSummarizer",
    "ResponsesCompactionSummarizer",
    "Summarizer",
    "TokenEstimator",
    "item_count_trigger",
    "token_threshold_trigger",
]
