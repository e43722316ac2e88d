"""Issue 25 item 4: the declared dependencies match what agent_sessions imports."""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
SELF = "agent-sessions-store"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _name(requirement: str) -> str:
    return _norm(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])


class _Imports(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if not ast.unparse(node.test).endswith("TYPE_CHECKING"):
            self.generic_visit(node)
            return
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        self.found |= {alias.name.partition(".")[0] for alias in node.names}

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self.found.add(node.module.partition(".")[0])


@functools.cache
def _imported_modules() -> frozenset[str]:
    """Top-level third-party modules agent_sessions imports at run time (not for type checks)."""
    visitor = _Imports()
    for path in (ROOT / "agent_sessions").rglob("*.py"):
        visitor.visit(ast.parse(path.read_text()))
    return frozenset(visitor.found - set(sys.stdlib_module_names) - {"agent_sessions"})


def _declared() -> tuple[set[str], set[str]]:
    """(core dependencies, everything any extra adds), as normalised distribution names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = {_name(r) for group in project["optional-dependencies"].values() for r in group}
    return core, extras - {SELF}


_DISTRIBUTIONS = packages_distributions()


def _providers(module: str) -> set[str]:
    return {_norm(d) for d in _DISTRIBUTIONS.get(module, [])}


def test_every_core_dependency_is_imported_by_the_package() -> None:
    core, _ = _declared()
    imported = set().union(*(_providers(m) for m in _imported_modules()))
    assert core - imported == set(), "core dependencies nothing imports: move them to an extra"


def test_every_imported_module_is_declared() -> None:
    core, extras = _declared()
    # What the SDK itself requires (openai, pydantic...) comes with the core dependency on it.
    sdk = {_name(r) for r in requires("openai-agents") or [] if "extra ==" not in r}
    missing = {m for m in _imported_modules() if not _providers(m) & (core | extras | sdk)}
    assert missing == set(), "imported but declared in no dependency list"
