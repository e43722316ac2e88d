"""``@explicit_options``: a misspelt keyword names the valid ones instead of a bare TypeError."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def public_options(func: Callable[..., object]) -> list[str]:
    """Return the options of ``func``: its keyword-only parameters and the positional ones with
    a default, except private ones (a leading underscore)."""
    return [
        p.name
        for p in inspect.signature(func).parameters.values()
        if (p.kind == p.KEYWORD_ONLY or (p.kind == p.POSITIONAL_OR_KEYWORD and p.default
                                         is not p.empty))
        and not p.name.startswith("_")
    ]


def explicit_options(func: Callable[P, R]) -> Callable[P, R]:
    """Decorate a constructor or factory so an unknown keyword raises a TypeError that names
    the valid options (and the closest one); the check runs only when the call fails."""
    accepted = set(inspect.signature(func).parameters)
    owner = func.__qualname__.replace(".__init__", "")

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except TypeError as exc:
            unknown = [key for key in kwargs if key not in accepted]
            if not unknown:
                raise
            valid = public_options(func)
            close = difflib.get_close_matches(unknown[0], valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(
                f"{owner} got unknown option(s) {', '.join(map(repr, unknown))}{hint} "
                f"Valid options: {', '.join(valid)}"
            ) from exc

    return wrapper


__all__ = ["explicit_options", "public_options"]
