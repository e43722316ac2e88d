"""Calling a session method with the SDK's optional ``wrapper=`` argument only when it takes it."""

from __future__ import annotations

import inspect
from typing import Any


def accepts_wrapper(method: Any) -> bool:
    """Whether ``method`` has a ``wrapper`` parameter that can be passed by keyword (the
    SDK's opt-in for receiving the run context)."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "wrapper" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        for p in parameters
    )


async def call_with_wrapper(method: Any, *args: Any, wrapper: Any = None) -> Any:
    """Await ``method(*args)``, passing ``wrapper=`` when given and the method takes it."""
    if wrapper is not None and accepts_wrapper(method):
        return await method(*args, wrapper=wrapper)
    return await method(*args)


__all__ = ["accepts_wrapper", "call_with_wrapper"]
