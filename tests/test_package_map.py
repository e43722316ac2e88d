"""Issue 25's map targets that ``lint-imports`` does not check: at most 40 reaches into another
object's ``_``-attributes (an AST count of ``x._name`` whose base is not ``self``, ``cls`` or
``super()``), outside ``memory/``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agent_sessions"
MOST_REACHES = 40


def _reaches(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        if not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue
        if isinstance(base, ast.Call) and ast.unparse(base.func) == "super":
            continue
        found.append(f"{ast.unparse(node)} (line {node.lineno})")
    return found


def test_the_count_sees_a_reach_and_not_an_own_attribute() -> None:
    source = "self._a\ncls._b\nsuper()._c()\nx.__dict__\nother._d\ntype(self)._e\n"
    assert _reaches(source) == ["other._d (line 5)", "type(self)._e (line 6)"]


def test_the_package_reaches_into_other_objects_at_most_40_times() -> None:
    reaches = [
        f"{path.relative_to(PACKAGE)}: {reach}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "memory" not in path.relative_to(PACKAGE).parts
        for reach in _reaches(path.read_text(encoding="utf-8"))
    ]
    assert reaches, "the count found nothing: the walk is broken"
    assert len(reaches) <= MOST_REACHES, "\n".join(reaches)
