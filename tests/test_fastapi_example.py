"""examples/fastapi_app.py: one engine for the process, one session per request, nothing
leaked between requests (TestClient runs the app's lifespan)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the FastAPI example needs fastapi (the dev extra)")
from fastapi.testclient import TestClient

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fastapi_app.py"


def _example() -> Any:
    """Load the example as a reader's app module (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chat_history_and_forget_over_one_pool(tmp_path: Path) -> None:
    app = _example().create_app(f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}")
    with TestClient(app) as client:
        engine = app.state.engine
        first = client.post("/chat/c1", json={"message": "Hi, I am Ada."})
        assert first.status_code == 200, first.text
        assert first.json() == {"reply": "reply 0", "items": 2}
        second = client.post("/chat/c1", json={"message": "Who am I?"})
        assert second.json() == {"reply": "reply 1", "items": 4}
        other = client.post("/chat/c2", json={"message": "Another conversation"})
        assert other.json()["items"] == 2

        history = client.get("/chat/c1/history").json()
        assert [item.get("content") for item in history if item.get("role") == "user"] == [
            "Hi, I am Ada.",
            "Who am I?",
        ]
        assert len(client.get("/chat/c1/history", params={"limit": 1}).json()) == 1

        assert client.delete("/chat/c1").status_code == 204
        assert client.get("/chat/c1/history").json() == []
        assert len(client.get("/chat/c2/history").json()) == 2

        assert app.state.engine is engine, "one engine (pool) for every request"
        assert engine.sync_engine.pool.checkedout() == 0, "each request gave its connection back"
