"""Tables (markdown) and the chart (PNG, matplotlib from the ``bench`` extra) of a run."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from benchmarks.harness import Result


def _fmt_us(us: float) -> str:
    if us >= 10_000:
        return f"{us / 1000:,.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.0f} µs"


def _size(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def section_table(results: list[Result]) -> list[str]:
    """One markdown table for results of one section (same contenders)."""
    names = list(results[0].samples)
    first = names[0]
    ratio_heads = [f"{n} ÷ {first}" for n in names[1:]]
    head = ["operation", "items", "object"] + [f"{n} (median)" for n in names] + ratio_heads
    head.append("spread")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for r in results:
        med = {n: r.median_us(n) for n in names if n in r.samples}
        cells = [r.operation + (f" ({r.note})" if r.note else ""), _size(r.size), r.mode]
        cells += [_fmt_us(med[n]) if n in med else "-" for n in names]
        for n in names[1:]:
            if n not in med:
                cells.append("-")
            else:
                cells.append(f"{med[n] / med[first]:.2f}")
        worst = max(r.spread(n) for n in med)
        cells.append(f"±{worst * 50:.0f}%")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def scaling_table(results: list[Result]) -> list[str]:
    """Ours (first contender) per operation across history sizes, warm objects."""
    rows: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    sizes: set[int] = set()
    for r in results:
        if r.mode != "warm" or r.kind != "speed":
            continue
        first = next(iter(r.samples))
        rows[(r.section, r.operation)][r.size] = r.median_us(first)
        sizes.add(r.size)
    ordered = sorted(sizes)
    if len(ordered) < 2:
        return []
    head = ["section", "operation"] + [f"ours @{_size(s)}" for s in ordered]
    head.append(f"@{_size(ordered[-1])} ÷ @{_size(ordered[0])}")
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for (section, op), by_size in rows.items():
        if len(by_size) < 2:
            continue
        cells = [section, op] + [_fmt_us(by_size[s]) if s in by_size else "-" for s in ordered]
        lo, hi = min(by_size), max(by_size)
        cells.append(f"{by_size[hi] / by_size[lo]:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def by_section(results: list[Result]) -> dict[str, list[Result]]:
    grouped: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        grouped[r.section].append(r)
    return grouped


def print_results(results: list[Result]) -> None:
    for section, rows in by_section(results).items():
        print(f"\n## {section}\n")
        print("\n".join(section_table(rows)))
    scaling = scaling_table(results)
    if scaling:
        print("\n## Scaling\n")
        print("\n".join(scaling))


def chart(rows: list[dict[str, Any]], path: str) -> None:
    """Median latency of ours (solid) and the raw driver (dashed) by history size, one panel per
    section in a two-column grid (readable at page width). ``rows`` are ``Result.summary()``
    dicts, as saved in benchmarks.json."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = list(
        dict.fromkeys(
            r["section"]
            for r in rows
            if r["kind"] == "speed"
            and len({x["size"] for x in rows if x["section"] == r["section"]}) > 1
        )
    )
    if not sections:
        return
    cols = min(2, len(sections))
    grid = -(-len(sections) // cols)
    fig, axes = plt.subplots(grid, cols, figsize=(5 * cols, 3.6 * grid), squeeze=False)
    for ax in axes.flat[len(sections) :]:
        ax.set_visible(False)
    for ax, section in zip(axes.flat, sections, strict=False):
        warm = [r for r in rows if r["section"] == section and r["mode"] == "warm"]
        names = list(warm[0]["median_us"])
        for k, op in enumerate(sorted({r["operation"] for r in warm})):
            points = sorted((r["size"], r["median_us"]) for r in warm if r["operation"] == op)
            if len(points) < 2:
                continue
            xs = [size for size, _ in points]
            ax.plot(xs, [m[names[0]] for _, m in points], "o-", color=f"C{k}", label=op)
            if len(names) > 1:
                ax.plot(xs, [m[names[1]] for _, m in points], "x--", color=f"C{k}")
        if len(names) > 1:
            ax.plot([], [], "x--", color="gray", label=names[1])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(section, fontsize=10)
        ax.set_xlabel("items in the session")
        ax.set_ylabel("median µs per call")
        ax.legend(fontsize=7)
    fig.suptitle("ours (solid) vs the raw driver or the SDK (dashed), warm objects", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(
    results: list[Result], info: dict[str, Any], notes: list[str], chart_name: str | None
) -> str:
    """The whole report as markdown."""
    quick = " --quick" if info.get("quick") else ""
    packages = ", ".join(f"{k} {v}" for k, v in info["packages"].items())
    out = [
        "# Benchmarks",
        "",
        f"Generated by `make bench` (`python benchmarks/run.py{quick}`) on {info['date']}; "
        f"the code measured is commit {info['commit']}.",
        "",
        f"- Machine: {info['machine']}; load average {info['load_before']} before, "
        f"{info['load_after']} after (other processes shared the cores).",
        f"- Python {info['python']}, SQLite {info['sqlite']}; {packages}.",
        f"- Servers: {info.get('servers', '-')}.",
        "",
        "How to read: every contender ran in the same process and run, alternating call by call "
        'in a shuffled order. Times are medians per call; "spread" is half the interquartile '
        "range relative to the median, for the noisiest contender of the row. In backend "
        "tables a ratio `X ÷ ours` above 1 means ours is faster than X; in wrapper tables "
        '`W ÷ bare` is the wrapper\'s cost relative to the bare backend. "fresh" builds a new '
        'session object for every call (and closes it), as a web handler does; "warm" reuses '
        'one. "raw" is the fastest idiomatic driver code a user would write '
        "(benchmarks/raw.py), not ours: orjson when installed, as ours; autocommit; one "
        "statement per operation (a multi-row INSERT for a batch, one RPUSH, one DELETE ... "
        "RETURNING for a pop).",
        "",
    ]
    if chart_name:
        out += [f"![ours vs raw by history size]({chart_name})", ""]
    for section, rows in by_section(results).items():
        out += [f"## {section}", "", *section_table(rows), ""]
    scaling = scaling_table(results)
    if scaling:
        out += ["## Scaling (ours, warm)", "", *scaling, ""]
    extra = info.get("extra", [])
    if extra or notes:
        out += ["## Notes", ""] + [f"- {n}" for n in [*extra, *notes]] + [""]
    return "\n".join(out)


if __name__ == "__main__":
    # Redraw the chart from saved results (no new measurement): python -m benchmarks.report
    # docs/benchmarks.json
    import json
    import os
    import sys

    source = sys.argv[1] if len(sys.argv) > 1 else "docs/benchmarks.json"
    with open(source) as f:
        chart(json.load(f)["results"], os.path.join(os.path.dirname(source), "benchmarks.png"))
