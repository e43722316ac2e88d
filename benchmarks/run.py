"""Run every benchmark script in turn: ``python benchmarks/run.py [--quick] [name ...]``.

Names are the scripts' suffixes (sqlite, redis, sql, mongodb, wrappers, branching, compaction,
codec); default all. Each script compares ours, the raw driver and the SDK's class side by side
in one run and prints its own table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK_AWARE = {"sqlite", "redis", "sql", "mongodb", "wrappers", "branching", "compaction"}


def main() -> int:
    names = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer operations, smaller histories")
    parser.add_argument("only", nargs="*", choices=[[], *names], help="scripts to run")
    args = parser.parse_args()
    failed = []
    for name in args.only or names:
        command = [sys.executable, str(HERE / f"bench_{name}.py")]
        if args.quick and name in QUICK_AWARE:
            command.append("--quick")
        print(f"\n===== {name}: {' '.join(command[1:])}", flush=True)
        if subprocess.run(command, cwd=HERE.parent).returncode != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
