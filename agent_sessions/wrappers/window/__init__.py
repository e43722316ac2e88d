"""The window layer: what the model sees is a bounded, valid suffix of the history, with older
long texts optionally shortened (micro-compaction); the stored history is never changed."""

from .callback import window_input_callback
from .micro import MicroCompaction
from .plan import WindowBudget, plan_start, valid_starts
from .session import WindowSession

__all__ = [
    "MicroCompaction",
    "WindowBudget",
    "WindowSession",
    "plan_start",
    "valid_starts",
    "window_input_callback",
]
