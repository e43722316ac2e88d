#!/usr/bin/env bash
# Installs the package alone (no extras) into a fresh venv and runs scripts/smoke_core.py from
# outside the repository; then adds SQLAlchemy without a driver and checks the driver hints.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check -c "$repo/constraints.txt" "$repo" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
cd "$work"
"$work/venv/bin/python" "$repo/scripts/smoke_core.py"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check -c "$repo/constraints.txt" "sqlalchemy[asyncio]>=2.0" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
"$work/venv/bin/python" "$repo/scripts/smoke_core.py" --sqlalchemy-only
