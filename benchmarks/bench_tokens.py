"""The offline token estimate (``estimate_text``) against real tokenizer counts.

    python benchmarks/bench_tokens.py [--encodings cl100k_base o200k_base]

Corpus: the paragraphs of docs/*.md (English prose, tables and code), the lines of
tests/data/cjk_eval.json (Korean, Chinese, Japanese, English), 200 generated Korean lines
(benchmarks/bench_recall.py's) and a few Korean, Chinese and Japanese paragraphs below. For
each part: the tokens per character of each encoding and the estimate's error per text
(estimate / real - 1): median, 5th and 95th percentile, worst. An encoding is loaded with
tiktoken, else with ``bpe_openai`` (PyPI ``bpe-openai``, which ships its files); one that
loads with neither is skipped and said so.
"""

# ruff: noqa: RUF001 (Chinese and Japanese punctuation in the corpus)
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent_sessions.wrappers.compaction.tokens import estimate_text
from benchmarks.bench_recall import korean_sentence

ROOT = Path(__file__).resolve().parent.parent
PARAGRAPHS = {
    "ko": [
        "오늘은 아침부터 비가 내려서 우산을 챙겨 나갔어요. 회사에 도착하니 회의가 벌써 "
        "시작되어 있었고, 다음 분기 계획에 대해 한 시간 넘게 이야기했습니다. 점심에는 "
        "동료들과 김치찌개를 먹었는데 생각보다 맵지 않아서 좋았어요.",
        "주말에 부산에 있는 부모님 댁에 다녀왔습니다. 해운대 바닷가를 산책하고 "
        "자갈치 시장에서 회를 먹었어요. 다음 달에는 제주도로 가족 여행을 가기로 했습니다.",
    ],
    "zh": [
        "今天早上下雨了，我带着雨伞去上班。到公司的时候会议已经开始了，我们讨论了下个季度的"
        "计划，一直谈了一个多小时。中午和同事们一起吃了火锅，味道很好。",
        "上个周末我去北京看望父母，我们一起去了故宫和长城。下个月我们打算全家去上海旅行。",
    ],
    "ja": [
        "今朝は雨が降っていたので、傘を持って出かけました。会社に着くと会議がもう始まって"
        "いて、来期の計画について一時間以上話し合いました。お昼は同僚とラーメンを食べました。",
        "週末に大阪の実家に帰りました。両親と一緒に京都へ行き、お寺を見て回りました。来月は"
        "家族で東京に旅行する予定です。",
    ],
}


def corpus() -> dict[str, list[str]]:
    """The texts of each part of the corpus."""
    docs = [
        p.strip()
        for f in sorted((ROOT / "docs").glob("*.md"))
        for p in f.read_text("utf-8").split("\n\n")
        if len(p.strip()) >= 40
    ]
    data = json.loads((ROOT / "tests" / "data" / "cjk_eval.json").read_text("utf-8"))
    lines: dict[str, list[str]] = {}
    for doc in data["documents"]:
        lines.setdefault(doc["lang"], []).append(doc["text"])
    rng = random.Random(1)
    return {
        "English (docs/*.md paragraphs)": docs,
        "English (eval lines)": lines["en"],
        "Korean (eval lines + paragraphs)": lines["ko"] + PARAGRAPHS["ko"],
        "Korean (generated lines)": [korean_sentence(rng) for _ in range(200)],
        "Chinese (eval lines + paragraphs)": lines["zh"] + PARAGRAPHS["zh"],
        "Japanese (eval lines + paragraphs)": lines["ja"] + PARAGRAPHS["ja"],
    }


def load(name: str) -> Any:
    """``name``'s encoder (tiktoken's, else bpe_openai's), or None."""
    try:
        import tiktoken

        return tiktoken.get_encoding(name)
    except Exception:
        pass
    try:
        import bpe_openai  # type: ignore[import-not-found]

        return bpe_openai.get_encoding(name)
    except Exception:
        return None


def measure(encoder: Any, texts: list[str]) -> dict[str, float]:
    """Tokens per character and the estimate's error per text (estimate / real - 1)."""
    real = [len(encoder.encode(t)) for t in texts]
    errors: list[float] = sorted(
        estimate_text(t) / max(r, 1) - 1 for t, r in zip(texts, real, strict=True)
    )
    chars = sum(map(len, texts))
    return {
        "texts": len(texts),
        "real_per_char": round(sum(real) / chars, 3),
        "estimate_per_char": round(sum(map(estimate_text, texts)) / chars, 3),
        "error_median": round(statistics.median(errors), 3),
        "error_p5": round(errors[len(errors) // 20], 3),
        "error_p95": round(errors[-1 - len(errors) // 20], 3),
        "error_worst": round(errors[0] if -errors[0] > errors[-1] else errors[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    args = parser.parse_args()
    parts = corpus()
    for name in args.encodings:
        encoder = load(name)
        if encoder is None:
            print(f"{name}: not loadable here (no tiktoken file, no bpe_openai): skipped")
            continue
        for part, texts in parts.items():
            print(name, part, measure(encoder, texts), flush=True)


if __name__ == "__main__":
    main()
