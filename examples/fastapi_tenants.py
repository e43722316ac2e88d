"""A multi-tenant FastAPI chat service: one Agent and one session object for every tenant.

``ContextScopedSession`` keys the history by the run context: each request runs the agent with
``context=Caller(tenant, user)``, and the Runner (openai-agents >= 0.25) hands that context to
the session, which reads and writes the store's session ``"<tenant>:<user>"`` — a plain session
of the store, encrypted under a key of its own when ``ENCRYPTION_KEY`` is set.

Run it (offline, a scripted model answers; needs ``fastapi`` and ``uvicorn``)::

    uvicorn examples.fastapi_tenants:app
    curl -X POST localhost:8000/chat -H 'x-tenant: acme' -H 'x-user: ada' \\
         -H 'content-type: application/json' -d '{"message": "hi"}'
    curl localhost:8000/history -H 'x-tenant: acme' -H 'x-user: ada'

``STORE_URL`` picks the store (default ``sqlite:///chat-tenants.db``; e.g.
``redis://localhost:6379/0`` or ``postgresql://app@db/app``). With ``OPENAI_API_KEY`` set the
agent uses a real model. In a real service the caller comes from authentication, not headers.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from agents import Agent, Runner
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from pydantic import BaseModel

from agent_sessions import ContextScopedSession, open_store

DEFAULT_URL = "sqlite:///chat-tenants.db"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Caller:
    """The run context: who is asking (from authentication, in a real service)."""

    tenant: str
    user: str


def scope(caller: Caller) -> str:
    """The session id of a caller's history. Injective: names never contain ``:``, so no two
    callers share an id."""
    return f"{caller.tenant}:{caller.user}"


class ChatIn(BaseModel):
    message: str


class ChatOut(BaseModel):
    reply: str


def default_agent() -> Agent[Caller]:
    """A real model with OPENAI_API_KEY, else an offline scripted one."""
    if os.environ.get("OPENAI_API_KEY"):
        return Agent(name="assistant", instructions="Reply briefly.", model="gpt-4.1-mini")
    from agents import set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message

    set_tracing_disabled(True)
    replies = [[assistant_message(f"reply {n}")] for n in range(10_000)]
    return Agent(name="assistant", instructions="Reply briefly.", model=ScriptedModel(replies))


def caller(x_tenant: Annotated[str, Header()], x_user: Annotated[str, Header()]) -> Caller:
    """The caller named by the request's headers (validated: they become a session id)."""
    if not (_NAME.match(x_tenant) and _NAME.match(x_user)):
        raise HTTPException(400, "x-tenant and x-user: 1-64 of A-Z a-z 0-9 _ -")
    return Caller(x_tenant, x_user)


Who = Annotated[Caller, Depends(caller)]


def shared_session(request: Request) -> ContextScopedSession:
    """The app's one session object (made in the lifespan), for every tenant."""
    return request.app.state.session  # type: ignore[no-any-return]


Session = Annotated[ContextScopedSession, Depends(shared_session)]


def create_app(
    store_url: str | None = None,
    agent: Agent[Caller] | None = None,
    encryption_key: str | None = None,
) -> FastAPI:
    """Build the app; the arguments default to the environment's choice."""
    url = store_url or os.environ.get("STORE_URL", DEFAULT_URL)
    key = encryption_key or os.environ.get("ENCRYPTION_KEY")
    chat_agent = agent or default_agent()
    wrap = None
    if key:
        from agent_sessions import EncryptedSession

        def wrap(session: Any) -> Any:  # a key per scope: derived from its session id
            return EncryptedSession(session, encryption_key=key)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.store = await open_store(url)  # the process's one connection pool
        app.state.session = ContextScopedSession(app.state.store, scope, wrap=wrap)
        try:
            yield
        finally:
            await app.state.store.close()

    app = FastAPI(title="chat", lifespan=lifespan)

    @app.post("/chat")
    async def chat(body: ChatIn, who: Who, session: Session) -> ChatOut:
        result = await Runner.run(chat_agent, body.message, context=who, session=session)
        return ChatOut(reply=str(result.final_output))

    @app.get("/history")
    async def history(who: Who, session: Session) -> list[dict[str, Any]]:
        async with await session.session_for(who) as own:  # type: ignore[attr-defined]
            return [dict(item) for item in await own.get_items()]

    @app.delete("/history", status_code=204)
    async def forget(who: Who, session: Session) -> None:
        async with await session.session_for(who) as own:  # type: ignore[attr-defined]
            await own.clear_session()

    return app


app = create_app()
