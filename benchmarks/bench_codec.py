"""Which JSON library the item codec should use: encode and decode speed on typical items.
``python benchmarks/bench_codec.py``"""

from __future__ import annotations

import json
import os
import sys
import timeit
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent_sessions.core import codec

ITEMS: dict[str, Any] = {
    "user message": {"role": "user", "content": "What is the weather in Paris today?"},
    "assistant message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": "It is sunny, 21°C. " * 10,
                "annotations": [],
                "logprobs": [],
            }
        ],
    },
    "tool output 8 KB": {
        "type": "function_call_output",
        "call_id": "c1",
        "output": json.dumps([{"k": i, "v": "x" * 60} for i in range(100)]),
    },
    # Issue 25: a nested item, where a validation walk in Python costs the most.
    "nested 200 entries": {
        "type": "function_call_output",
        "call_id": "c2",
        "output": [
            {"k": i, "v": "x" * 20, "f": i / 2, "tags": ["a", "b"], "meta": {"ok": True, "n": None}}
            for i in range(200)
        ],
    },
}


def main() -> None:
    std = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    candidates: dict[str, tuple[Any, Any]] = {"stdlib json": (std.encode, json.loads)}
    try:
        import orjson

        candidates["orjson"] = (orjson.dumps, orjson.loads)
    except ImportError:
        pass
    try:
        import msgspec

        candidates["msgspec"] = (msgspec.json.encode, msgspec.json.decode)
    except ImportError:
        pass
    print(f"{'item':20}{'library':14}{'encode µs':>11}{'decode µs':>11}")
    for name, item in ITEMS.items():
        for lib, (enc, dec) in candidates.items():
            data = enc(item)
            n = 1000 if name.startswith("nested") else 20000

            def encode(enc: Any = enc, item: Any = item) -> Any:
                return enc(item)

            def decode(dec: Any = dec, data: Any = data) -> Any:
                return dec(data)

            e = timeit.timeit(encode, number=n) / n * 1e6
            d = timeit.timeit(decode, number=n) / n * 1e6
            print(f"{name:20}{lib:14}{e:>11.2f}{d:>11.2f}")
        n = 1000 if name.startswith("nested") else 20000

        def encode_ours(item: Any = item) -> str:
            return codec.encode_item(item, 0)

        full = timeit.timeit(encode_ours, number=n) / n * 1e6
        used = codec.dumps.__name__
        print(f"{name:20}{'codec (ours)':14}{full:>11.2f}   (validate + encode, {used})")


if __name__ == "__main__":
    main()
