"""The distribution's name and the ``pip install`` hint for optional parts.

The package imports as ``agent_sessions`` but is published as ``agent-sessions-store``: the
name ``agent-sessions`` on the package index belongs to an unrelated project.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import MissingDependencyError

DISTRIBUTION = "agent-sessions-store"
"""The name to ``pip install``."""


def install_hint(extra: str | None = None) -> str:
    """Return the ``pip install`` command for ``extra`` (the core when None)."""
    if extra is None:
        return f'pip install "{DISTRIBUTION}"'
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def missing(feature: str, extra: str, exc: ImportError) -> MissingDependencyError:
    """Return the error for ``feature`` needing the ``extra`` whose import raised ``exc``."""
    name = exc.name or str(exc)
    return MissingDependencyError(
        f"{feature} needs the package {name!r}, which is not installed; install it with: "
        f"{install_hint(extra)}",
        name=name,
    )


def require(module: str, feature: str, extra: str) -> ModuleType:
    """Import ``module`` or raise MissingDependencyError naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing(feature, extra, exc) from exc


__all__ = ["DISTRIBUTION", "install_hint", "missing", "require"]
