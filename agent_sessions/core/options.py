"""A misspelt constructor keyword names the valid options instead of a bare TypeError: for
classes built on ``OptionsChecked`` (read from the signatures along ``**options`` forwarding)
and for factories decorated with ``explicit_options``."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def _options(funcs: list[Callable[..., object]]) -> tuple[set[str], list[str]]:
    """(every keyword ``funcs`` accept, the public options among them, in signature order):
    keyword-only parameters and positional ones with a default, without a leading underscore.
    Each function after the first is the one the previous forwards ``**options`` to."""
    accepted: set[str] = set()
    public: list[str] = []
    for func in funcs:
        parameters = inspect.signature(func).parameters.values()
        for p in parameters:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in accepted:
                continue
            accepted.add(p.name)
            if (
                p.kind == p.KEYWORD_ONLY
                or (p.kind == p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)
            ) and not p.name.startswith("_"):
                public.append(p.name)
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return accepted, public


def _checked(
    func: Callable[P, R], owner: str, chain: list[Callable[..., object]]
) -> Callable[P, R]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except TypeError as exc:
            accepted, valid = _options(chain)
            unknown = [key for key in kwargs if key not in accepted]
            if not unknown:
                raise
            close = difflib.get_close_matches(unknown[0], valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"{owner} got unknown option(s) {', '.join(map(repr, unknown))}{hint}. "
                f"Valid options: {', '.join(valid)}"
            ) from exc

    return wrapper


def explicit_options(func: Callable[P, R]) -> Callable[P, R]:
    """Decorate a factory so an unknown keyword raises a TypeError that names the valid
    options (and the closest one); the check runs only when the call fails."""
    return _checked(func, func.__qualname__, [func])


class OptionsChecked:
    """Checks the keywords of every subclass's constructor as ``explicit_options`` does."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            chain = [k.__dict__["__init__"] for k in cls.__mro__ if "__init__" in k.__dict__]
            setattr(cls, "__init__", _checked(init, cls.__qualname__, chain))  # noqa: B010


def check_int(name: str, value: object, least: int = 0, *, least_text: str = "") -> None:
    """Raise ValueError unless ``value`` is an int (not a bool) >= ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least_text or least}, got {value!r}")


__all__ = ["OptionsChecked", "check_int", "explicit_options"]
