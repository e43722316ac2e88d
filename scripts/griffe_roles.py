"""A griffe extension for `make docs`: Sphinx roles in docstrings become code spans.

Docstrings name other objects the Sphinx way (``:class:`~agent_sessions.errors.SessionError```),
which Python's ``help()`` and IDEs show as is; mkdocstrings renders Markdown and would print the
role. ``:role:`~a.b.C``` becomes ```C```; ``:role:`a.b.C``` becomes ```a.b.C```.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|mod|exc|data|obj|const):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``text`` with every Sphinx cross-reference role replaced by a code span."""
    return ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)


class SphinxRoles(griffe.Extension):
    """Rewrites the docstring of every object griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
