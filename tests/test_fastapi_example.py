"""examples/fastapi_app.py: one engine for the process, one session per request, nothing
leaked between requests (TestClient runs the app's lifespan). examples/fastapi_tenants.py: one
ContextScopedSession for every tenant, each history its own session of the store."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the FastAPI example needs fastapi (the dev extra)")
from fastapi.testclient import TestClient

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _example(script: str = "fastapi_app.py") -> Any:
    """Load the example as a reader's app module (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), EXAMPLES / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
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


def test_tenants_share_one_agent_and_session_and_never_see_each_other(tmp_path: Path) -> None:
    import asyncio

    from cryptography.fernet import Fernet

    from agent_sessions import EncryptedSession, is_encrypted, open_store
    from agent_sessions.testing import model_input_texts, scripted_agent

    url, key = f"sqlite:///{tmp_path / 'tenants.db'}", Fernet.generate_key().decode()
    agent, model = scripted_agent("r0", "r1", "r2")
    app = _example("fastapi_tenants.py").create_app(url, agent, encryption_key=key)
    acme = {"x-tenant": "acme", "x-user": "ada"}
    globex = {"x-tenant": "globex", "x-user": "ada"}
    with TestClient(app) as client:
        session = app.state.session
        assert client.post("/chat", json={"message": "I am Ada"}, headers=acme).json() == {
            "reply": "r0"
        }
        client.post("/chat", json={"message": "globex secret"}, headers=globex)
        client.post("/chat", json={"message": "Who am I?"}, headers=acme)
        assert app.state.session is session, "one session object for every request"
        assert model_input_texts(model, 1) == ["globex secret"]
        assert model_input_texts(model, 2) == ["I am Ada", "r0", "Who am I?"]
        history = client.get("/history", headers=acme).json()
        assert [item.get("role") for item in history] == ["user", "assistant"] * 2
        assert client.get("/history", headers={"x-tenant": "a:b", "x-user": "c"}).status_code == 400
        assert client.delete("/history", headers=acme).status_code == 204
        assert client.get("/history", headers=acme).json() == []
        assert len(client.get("/history", headers=globex).json()) == 2

    async def stored() -> None:
        # Each scope is a plain session of the store, encrypted under a key of its own.
        store = await open_store(url)
        try:
            raw = await store.session("globex:ada").get_items()
            assert len(raw) == 2 and all(is_encrypted(item) for item in raw)
            own = EncryptedSession(store.session("globex:ada"), encryption_key=key)
            assert (await own.get_items())[0].get("content") == "globex secret"
            copied = store.session("acme:ada")
            await copied.add_items(raw)  # another scope's items do not open here
            assert await EncryptedSession(copied, encryption_key=key).get_items() == []
            await copied.clear_session()
        finally:
            await store.close()

    asyncio.run(stored())
