"""Long-term memory over the same stores as the sessions: core blocks, recall search,
archival passages and sleep-time upkeep, per scope (agent and/or user). See docs/memory.md."""

from ..errors import BlockConflictError, MemoryEditError
from .archival import Archive, Passage
from .blocks import Block, Blocks
from .core import Memory, Tidied, render_blocks, scope_id
from .embedders import Embedder, HashingEmbedder, OpenAIEmbedder, WordLlamaEmbedder
from .recall import RecallHit, RecallIndex, RecallSession
from .tools import memory_tools
from .upkeep import UPKEEP_PROMPT, Upkeep, upkeep_agent

__all__ = [
    "UPKEEP_PROMPT",
    "Archive",
    "Block",
    "BlockConflictError",
    "Blocks",
    "Embedder",
    "HashingEmbedder",
    "Memory",
    "MemoryEditError",
    "OpenAIEmbedder",
    "Passage",
    "RecallHit",
    "RecallIndex",
    "RecallSession",
    "Tidied",
    "Upkeep",
    "WordLlamaEmbedder",
    "memory_tools",
    "render_blocks",
    "scope_id",
    "upkeep_agent",
]
