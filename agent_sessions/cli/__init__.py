"""The ``agent-sessions`` command line (also ``python -m agent_sessions``).

Built on Typer and Rich. This module imports neither the Agents SDK nor any driver: a command
imports what it needs when it runs, so ``--help`` and ``--version`` stay fast.

Exit codes: 0 success, 1 an error (message on stderr), 2 a usage error, 130 interrupted,
141 the reader of the output left (a closed pipe).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from contextlib import suppress


def _interrupted(note: str | None) -> int:
    print(f"agent-sessions: interrupted{'; ' + note if note else ''}", file=sys.stderr)
    return 130


def _pipe_closed() -> int:
    """The reader of stdout left (``export URL | head -1``): exit as Unix tools do, silently;
    stdout goes to /dev/null so the interpreter's final flush cannot complain either."""
    import os

    sys.stdout = getattr(sys.stdout, "wrapped", sys.stdout)
    sys.stderr = getattr(sys.stderr, "wrapped", sys.stderr)
    with open(os.devnull, "w") as devnull, suppress(OSError, ValueError):
        os.dup2(devnull.fileno(), sys.stdout.fileno())
    return 141  # 128 + SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    import typer

    from .light_sdk import load_session_protocol

    load_session_protocol()
    from . import app as commands

    args = list(sys.argv[1:] if argv is None else argv)
    commands.begin(args)
    try:
        result = commands.app(args=args, prog_name="agent-sessions", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        print("agent-sessions: aborted", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted(commands.interrupted_note())
    except BrokenPipeError:
        return _pipe_closed()
    except SystemExit as exc:
        # Typer answers a closed stdout with exit 1 after wrapping the streams (PacifyFlush-
        # Wrapper); tests/test_cli_edges.py::test_a_closed_pipe_ends_the_command_quietly.
        if exc.code == 1 and hasattr(sys.stdout, "wrapped"):
            return _pipe_closed()
        raise
    except Exception as exc:
        # Usage errors: Click's ClickException (vendored by recent Typer releases) shows itself.
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if show is None or not isinstance(code, int):
            raise
        message = getattr(exc, "message", None)
        if isinstance(message, str):
            setattr(exc, "message", commands.scrub(message))  # noqa: B010
        show()
        return code
    if result == 130:  # Click returns Typer's Exit(130) for Ctrl-C when not standalone
        return _interrupted(commands.interrupted_note())
    return result if isinstance(result, int) else 0
