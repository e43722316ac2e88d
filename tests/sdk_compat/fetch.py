"""Fetch the installed openai-agents version's sdist and extract its test tree, cached.

The SDK's session tests are not in its wheel, so they come from the sdist of exactly the
installed version (``pip download``), extracted once into ``.cache/sdk-tests/<version>/``
(git-ignored; never committed).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("AGENT_SESSIONS_SDK_TESTS_CACHE", REPO / ".cache" / "sdk-tests"))
_DONE = ".extracted"


class FetchError(RuntimeError):
    """The sdist could not be downloaded or read (no network, no such version)."""


def sdk_version() -> str:
    """Return the installed openai-agents version."""
    return importlib.metadata.version("openai-agents")


def pinned_version() -> str:
    """Return the openai-agents version constraints.txt pins (what ``make test`` installs)."""
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.startswith("openai-agents=="):
            return line.split("==", 1)[1].strip()
    raise LookupError("constraints.txt pins no openai-agents version")


def sdk_tree(version: str | None = None) -> Path:
    """Return a directory holding the sdist's ``pyproject.toml`` and ``tests/``, fetching it
    on first use.

    Raises:
        FetchError: the download failed (the message carries pip's last lines).
    """
    version = version or sdk_version()
    root = CACHE / version
    if (root / _DONE).exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        archive = _download(version, Path(tmp))
        staging = Path(tmp) / "tree"
        _extract(archive, staging)
        (staging / _DONE).write_text(version)
        try:
            staging.rename(root)
        except OSError:  # another process finished first
            if not (root / _DONE).exists():
                shutil.rmtree(root, ignore_errors=True)
                staging.rename(root)
    return root


def _download(version: str, into: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--disable-pip-version-check",
        "-d",
        str(into),
        f"openai-agents=={version}",
    ]
    try:
        import hatchling  # noqa: F401  (the SDK's build backend: skips a 40 s build env)
    except ImportError:
        pass
    else:
        command.insert(4, "--no-build-isolation")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        raise FetchError(f"pip download of openai-agents=={version} timed out") from exc
    archives = sorted(into.glob("openai[_-]agents-*.tar.gz"))
    if done.returncode != 0 or not archives:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise FetchError(f"pip download of the openai-agents=={version} sdist failed:\n{tail}")
    return archives[0]


def _extract(archive: Path, into: Path) -> None:
    """Extract ``<top>/pyproject.toml`` and ``<top>/tests/**`` (regular files only)."""
    into.mkdir()
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if len(parts) < 2 or not member.isfile() or ".." in parts:
                continue
            rel = Path(*parts[1:])
            if rel != Path("pyproject.toml") and parts[1] != "tests":
                continue
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            with source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
