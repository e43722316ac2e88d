"""The Agents SDK's session protocol, without importing the whole SDK.

``agents/__init__.py`` imports every part of the SDK (models, tracing, MCP: 1 to 2 s), and any
``from agents.memory import ...`` runs it first. The backends need only ``Session``,
``SessionABC`` and ``SessionSettings``, which live in modules that import little. So while the
SDK is not imported yet, those modules are loaded under their own names without running the
package's ``__init__``; a later ``import agents`` finds them in ``sys.modules`` and reuses them,
so every class is the SDK's very object (``isinstance`` and subclass checks hold), and a
finder gives the packages those submodules as attributes when they are imported, as an
ordinary import does. Once the SDK is imported this module simply imports from it. The CLI's
reading commands (``list``, ``show``, ``stats``, ``export``, ``delete``) rely on this to start
fast.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

_PACKAGES = ("agents", "agents.memory")


class _Attach(importlib.abc.MetaPathFinder):
    """Before the SDK's packages run, set the submodules loaded early as their attributes."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in _PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def attach_then_run(module: ModuleType) -> None:
            for full, child in list(sys.modules.items()):
                parent, _, attr = full.rpartition(".")
                if parent == name:
                    setattr(module, attr, child)
            if name == _PACKAGES[-1] and self in sys.meta_path:
                sys.meta_path.remove(self)
            run(module)

        spec.loader.exec_module = attach_then_run  # type: ignore[method-assign]
        return spec


class _Refuse(importlib.abc.MetaPathFinder):
    """Stops an early-loaded module from importing the SDK package (it would import a
    half-loaded module of ours back: a circular import)."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name == "agents":
            raise ImportError("needs the whole SDK")
        return None


def _standalone(names: Sequence[str]) -> bool:
    """Load the SDK modules ``names`` without ``agents/__init__``; return False, leaving none
    of them loaded, when one needs more of the SDK (another SDK version)."""
    root = importlib.util.find_spec("agents")  # finds the package, imports nothing
    if root is None or not root.submodule_search_locations:
        return False
    refuse = _Refuse()
    sys.meta_path.insert(0, refuse)
    loaded: list[str] = []
    try:
        for name in names:
            path = os.path.join(root.submodule_search_locations[0], *name.split(".")[1:])
            spec = importlib.util.spec_from_file_location(name, path + ".py")
            if spec is None or spec.loader is None:
                raise ImportError(name)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            loaded.append(name)
            spec.loader.exec_module(module)
    except (ImportError, OSError):
        for name in loaded:
            del sys.modules[name]
        return False
    finally:
        sys.meta_path.remove(refuse)
    sys.meta_path.insert(0, _Attach())
    return True


if TYPE_CHECKING:
    from agents.memory import Session, SessionABC, SessionSettings
    from agents.memory.session_settings import coerce_session_settings
else:
    if "agents" not in sys.modules:
        # session_settings imports _config_coercion from the package: that one first.
        _standalone(
            ["agents._config_coercion", "agents.memory.session", "agents.memory.session_settings"]
        )
    _session = importlib.import_module("agents.memory.session")  # the early one, if loaded
    _settings = importlib.import_module("agents.memory.session_settings")
    Session = _session.Session
    SessionABC = _session.SessionABC
    SessionSettings = _settings.SessionSettings
    coerce_session_settings = _settings.coerce_session_settings

__all__ = ["Session", "SessionABC", "SessionSettings", "coerce_session_settings"]
