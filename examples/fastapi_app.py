"""A FastAPI chat service: one connection pool per process, one session per request.

The engine (its connection pool) is made once, in the app's lifespan, and disposed at
shutdown; each request opens a light ``SQLAlchemySession`` over it and closes it when the
response is sent, which returns its connection to the pool and leaves the engine open.

Run it (offline, a scripted model answers; needs ``fastapi``, ``uvicorn`` and the
``sqlalchemy`` extra)::

    uvicorn examples.fastapi_app:app
    curl -X POST localhost:8000/chat/c1 -H 'content-type: application/json' -d '{"message": "hi"}'
    curl localhost:8000/chat/c1/history

``DATABASE_URL`` picks the database (default ``sqlite+aiosqlite:///chat.db``; e.g.
``postgresql+asyncpg://app@db/app``). With ``OPENAI_API_KEY`` set the agent uses a real model.
With Redis, make one ``redis.asyncio.Redis`` in the lifespan the same way and open
``RedisSession(conversation_id, client=app.state.redis)`` per request.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from agents import Agent, Runner
from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import create_async_engine

from agent_sessions import SQLAlchemySession

DEFAULT_URL = "sqlite+aiosqlite:///chat.db"


class ChatIn(BaseModel):
    message: str


class ChatOut(BaseModel):
    reply: str
    items: int


def default_agent() -> Agent[Any]:
    """A real model with OPENAI_API_KEY, else an offline scripted one that echoes."""
    if os.environ.get("OPENAI_API_KEY"):
        return Agent(name="assistant", instructions="Reply briefly.", model="gpt-4.1-mini")
    from agents import set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message

    set_tracing_disabled(True)
    replies = [[assistant_message(f"reply {n}")] for n in range(10_000)]
    return Agent(name="assistant", instructions="Reply briefly.", model=ScriptedModel(replies))


async def conversation(conversation_id: str, request: Request) -> AsyncIterator[SQLAlchemySession]:
    """One session per request, over the process's engine; closed after the response."""
    engine = request.app.state.engine
    session = SQLAlchemySession(conversation_id, engine=engine, create_tables=True)
    try:
        yield session
    finally:
        await session.close()


Session = Annotated[SQLAlchemySession, Depends(conversation)]


def create_app(database_url: str | None = None, agent: Agent[Any] | None = None) -> FastAPI:
    """Build the app; ``database_url`` and ``agent`` default to the environment's choice."""
    url = database_url or os.environ.get("DATABASE_URL", DEFAULT_URL)
    chat_agent = agent or default_agent()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = create_async_engine(url)  # the process's one pool
        try:
            yield
        finally:
            await app.state.engine.dispose()

    app = FastAPI(title="chat", lifespan=lifespan)

    @app.post("/chat/{conversation_id}")
    async def chat(body: ChatIn, session: Session) -> ChatOut:
        result = await Runner.run(chat_agent, body.message, session=session)
        return ChatOut(reply=str(result.final_output), items=await session.count_items())

    @app.get("/chat/{conversation_id}/history")
    async def history(session: Session, limit: int | None = None) -> list[dict[str, Any]]:
        return [dict(item) for item in await session.get_items(limit)]

    @app.delete("/chat/{conversation_id}", status_code=204)
    async def forget(session: Session) -> None:
        await session.clear_session()

    return app


app = create_app()
