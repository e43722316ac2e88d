"""The distribution's name (``agent-sessions-store``: ``agent-sessions`` on the package index
is an unrelated project) and the ``pip install`` hint for optional parts."""

from __future__ import annotations

import importlib
import re
from types import ModuleType

from ..errors import MissingDependencyError

DISTRIBUTION = "agent-sessions-store"
"""The name to ``pip install``."""


def install_hint(extra: str | None = None) -> str:
    """Return the ``pip install`` command for ``extra`` (the core when None)."""
    return f'pip install "{DISTRIBUTION}{"" if extra is None else f"[{extra}]"}"'


def missing(feature: str, extra: str | None, exc: ImportError) -> MissingDependencyError:
    """Return the error for ``feature`` needing the ``extra`` whose import raised ``exc``."""
    # An ImportError raised by hand (the SDK's "RedisSession requires the 'redis' extra...")
    # names no module: take the quoted one, so every scheme reads the same (issue 41).
    quoted = re.search(r"'([A-Za-z0-9_.\-]+)'", str(exc))
    name = exc.name or (quoted.group(1) if quoted else extra or str(exc))
    return MissingDependencyError(
        f"{feature} needs the package {name!r}, which is not installed; install it with: "
        f"{install_hint(extra)}",
        name=name,
    )


def require(module: str, feature: str, extra: str | None) -> ModuleType:
    """Import ``module`` or raise MissingDependencyError naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(feature, extra, exc) from exc


__all__ = ["DISTRIBUTION", "install_hint", "missing", "require"]
