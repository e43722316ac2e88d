"""Collects what the fault tests injected and checked; printed at the end of the pytest run."""

from __future__ import annotations

LINES: list[str] = []
SEED: list[int] = []
"""The random seed of the run (FAULT_SEED replays it)."""


def report(what: str, injected: str, checked: str) -> None:
    """Record one fault test's summary."""
    LINES.append(f"[faults] {what}: injected {injected}; checked {checked}")
