"""Test doubles defined in the SDK's own test files, loaded for use in this package's tests.

An SDK test file cannot be imported here (it imports the SDK's ``tests`` package, which ours
shadows), so :func:`sdk_classes` executes only the file's imports and the named class
definitions (with the file's classes they derive from), from the sdist of the installed
version (``fetch.sdk_tree``).
"""

from __future__ import annotations

import ast
import functools
from typing import Any

from tests.sdk_compat.fetch import sdk_tree

DAPR_TESTS = "tests/extensions/memory/test_dapr_session.py"


def _own_import(node: ast.stmt) -> bool:
    """Whether ``node`` imports something other than the SDK or its tests."""
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        modules = [node.module or ""]
    else:
        return False
    return not any(m.split(".")[0] in ("agents", "tests") for m in modules)


@functools.cache
def sdk_classes(path: str, *names: str) -> dict[str, Any]:
    """Return the classes ``names`` of the SDK test file at ``path`` (relative to the sdist).

    Raises:
        FetchError: the sdist could not be fetched.
        LookupError: the file defines no class of one of those names.
    """
    source = (sdk_tree() / path).read_text(encoding="utf-8")
    body = ast.parse(source).body
    classes = {node.name: node for node in body if isinstance(node, ast.ClassDef)}
    if missing := [n for n in names if n not in classes]:
        raise LookupError(f"{path} of the installed SDK defines no class {missing}")
    needed, todo = set(), list(names)
    while todo:  # the named classes and the file's classes they derive from
        name = todo.pop()
        if name in classes and name not in needed:
            needed.add(name)
            todo += [base.id for base in classes[name].bases if isinstance(base, ast.Name)]
    kept = [
        node
        for node in body
        if _own_import(node) or (isinstance(node, ast.ClassDef) and node.name in needed)
    ]
    namespace: dict[str, Any] = {"__name__": f"sdk_doubles.{path}"}
    exec(compile(ast.Module(kept, type_ignores=[]), path, "exec"), namespace)
    return {name: namespace[name] for name in names}
