"""The CLI's fast start: the SDK's session protocol without importing the whole SDK.

``agents/__init__.py`` imports every part of the SDK (1 to 2 s); the backends need only
``agents.memory.session`` and ``agents.memory.session_settings``. Before a command runs, the
CLI (never a library import) loads those under their own names without the packages'
``__init__``; the backends' imports and a later ``import agents`` reuse them (the very same
classes), and a finder sets them as the packages' attributes when those are imported.
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
    """Stops an early-loaded module from importing the SDK package (a circular import)."""

    def find_spec(self, name: str, *_: object) -> None:
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


def load_session_protocol() -> None:
    """Load the SDK's session protocol modules early (once, and only while the SDK is not
    imported); the library's own imports then find them in ``sys.modules``."""
    if "agents" not in sys.modules and "agents.memory.session" not in sys.modules:
        # session_settings imports _config_coercion from the package: that one first.
        _standalone(
            ["agents._config_coercion", "agents.memory.session", "agents.memory.session_settings"]
        )


__all__ = ["load_session_protocol"]
