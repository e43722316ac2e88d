"""The branching layer: copy-on-write conversation branches over any Session."""

from .session import BranchingSession

__all__ = ["BranchingSession"]
