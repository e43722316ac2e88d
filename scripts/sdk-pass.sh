#!/usr/bin/env bash
# `make test-sdk-latest` / `make test-sdk-oldest`: the SDK-facing tests on the newest
# openai-agents on the package index, or on the oldest release pyproject.toml allows, in a venv
# of its own (.venv-sdk-latest, .venv-sdk-oldest; kept between runs) holding the repo with
# constraints.txt for every other package. Under CI=true an index that cannot be reached fails
# the pass; elsewhere it is skipped with the reason.
set -euo pipefail
which="${1:?usage: sdk-pass.sh latest|oldest}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
venv="$repo/.venv-sdk-$which"
quiet() { grep -v "is ignored: it is neither a file nor a directory" || true; }

pinned="$(sed -n 's/^openai-agents==//p' constraints.txt)"
floor="$(sed -n 's/^ *"openai-agents>=\([0-9.]*\)[,"].*/\1/p' pyproject.toml)"
[ -n "$pinned" ] && [ -n "$floor" ] || { echo "no openai-agents pin or floor found" >&2; exit 2; }

# The newest release, asked of the index (through pip, so its index settings apply).
if ! index="$("$python" -m pip index versions openai-agents --disable-pip-version-check 2>&1)"; then
    reason="the package index gave no openai-agents versions (unreachable?): $(echo "$index" | quiet | tail -1)"
    if [ "${CI:-}" = "true" ]; then echo "FAILED test-sdk-$which: $reason" >&2; exit 1; fi
    echo "SKIPPED test-sdk-$which: $reason"
    exit 0
fi
newest="$(echo "$index" | sed -n 's/^openai-agents (\(.*\))$/\1/p')"
[ -n "$newest" ] || { echo "could not read the newest version from: $index" >&2; exit 2; }

case "$which" in
    latest) version="$newest" ;;
    oldest) version="$floor" ;;
    *) echo "usage: sdk-pass.sh latest|oldest" >&2; exit 2 ;;
esac
note=""
[ "$version" = "$pinned" ] && note=" (the same as the pinned one in constraints.txt: run anyway, it is cheap)"
echo "test-sdk-$which: openai-agents $version$note; newest on the index: $newest, pinned: $pinned"

# Install once per version and per change of pyproject.toml, constraints.txt or this script.
stamp="$venv/.installed-$version-$(cat pyproject.toml constraints.txt "$0" | sha256sum | cut -c1-16)"
if [ ! -e "$stamp" ]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    grep -v '^openai-agents==' constraints.txt > "$venv/constraints.txt"
    # The extras and the dev packages these tests import (not the docs, lint or memory tools).
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$venv/constraints.txt" \
        -e ".[all,testing]" pytest-timeout hypothesis mongomock-motor motor aiomysql hatchling \
        dapr fastapi httpx "openai-agents==$version" 2>&1 | quiet
    touch "$stamp"
fi
ran="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("openai-agents"))')"
[ "$ran" = "$version" ] || { echo "installed openai-agents $ran, not $version" >&2; exit 1; }

# The SDK seam: the SDK's own session test files (the budgeted CI cases), the adapter for its
# classes (SQLiteSession, DaprSession, OpenAIConversationsSession; the kit's core tier runs on
# them there), Runner runs through the layers; more files as arguments (the latest pass adds the
# context-scope tests, which need the Runner of 0.25 or later).
PYTHONPATH="$repo" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    tests/test_sdk_suite.py tests/test_foreign.py tests/test_dapr.py \
    tests/test_compaction_runner.py tests/test_usage.py tests/test_sdk_layouts.py \
    "${@:2}"
echo "test-sdk-$which: passed on openai-agents $ran$note"
