"""Session info (user, title, metadata) on every backend, and erasing a user everywhere: their
sessions, memory scopes and the recall entries other scopes indexed from their sessions."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agent_sessions.memory import Memory
from agent_sessions.memory.core import scope_id
from agent_sessions.ops.catalog import InvalidTagError, SessionCatalog
from agent_sessions.ops.users import erase_user
from tests.matrix import BACKENDS, Backend


def _msg(text: str) -> Any:
    return {"role": "user", "content": text}


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    chosen: Backend = request.param
    if chosen.needs is not None:
        chosen.needs()
    return chosen


@pytest.mark.asyncio
async def test_tags_list_by_user_and_erase_a_user_everywhere(backend: Backend) -> None:
    run = uuid.uuid4().hex[:8]
    ada, bob = f"ada{run}", f"bob{run}"
    ids = {f"{run}-a1": ada, f"{run}-a2": ada, f"{run}-b1": bob}
    sessions = {sid: await backend.open(sid) for sid in ids}
    opened: list[Any] = list(sessions.values())
    try:
        catalog = SessionCatalog(sessions[f"{run}-a1"])  # type: ignore[arg-type]
        for n, (sid, user) in enumerate(ids.items()):
            await catalog.tag(sid, user_id=user, title=f"chat {n}", metadata={"plan": "pro"})
        await catalog.tag(f"{run}-a2", title="renamed")  # the other tags stay
        # Memory: a scope of each user, and a shared agent scope that indexed both users' chats.
        scopes = {who: await backend.open(scope_id("helper", who)) for who in (ada, bob)}
        shared = await backend.open(scope_id(f"shared{run}"))
        opened += [*scopes.values(), shared]
        for who, root in scopes.items():
            await Memory(root).blocks.define("human", f"name: {who}")
        index = Memory(shared)
        for sid, session in sessions.items():
            await index.session(session).add_items([_msg(f"words of {sid}")])

        by_user = [i async for i in catalog.tagged(user_id=ada)]
        assert [(i.session_id, i.title, i.item_count) for i in by_user] == [
            (f"{run}-a1", "chat 0", 1),
            (f"{run}-a2", "renamed", 1),
        ]
        assert by_user[1].metadata == {"plan": "pro"} and by_user[1].user_id == ada
        listed = await catalog.with_tags((await catalog.list_sessions(prefix=run)).sessions)
        assert [i.user_id for i in listed] == [ada, ada, bob]

        plan = await erase_user(catalog, ada, dry_run=True)
        assert plan.sessions == [f"{run}-a1", f"{run}-a2"]
        assert plan.memory_scopes == [scope_id("helper", ada)]
        assert plan.recall == {scope_id(f"shared{run}"): [f"{run}-a1", f"{run}-a2"]}
        assert len([i async for i in catalog.tagged(user_id=ada)]) == 2  # a dry run changes nothing

        done = await erase_user(catalog, ada)
        assert done.as_dict() == {**plan.as_dict(), "dry_run": False}
        assert [i async for i in catalog.tagged(user_id=ada)] == []
        assert [i.session_id for i in (await catalog.list_sessions(prefix=run)).sessions] == [
            f"{run}-b1"
        ]
        assert await catalog.family(scope_id("helper", ada)) == []
        assert await catalog.family(scope_id("helper", bob)) != []
        hits = await Memory(shared).recall.search("words")
        assert sorted(h.session_id for h in hits) == [f"{run}-b1"]
        assert [i.title async for i in catalog.tagged(user_id=bob)] == ["chat 2"]
        assert await sessions[f"{run}-b1"].get_items() == [_msg(f"words of {run}-b1")]
        blocks = await Memory(scopes[bob]).blocks.all()
        assert [b.value for b in blocks] == [f"name: {bob}"]
    finally:
        cleanup = SessionCatalog(opened[0])
        await cleanup.delete_sessions([s.session_id for s in opened])  # type: ignore[attr-defined]
        for session in opened:
            await session.close()  # type: ignore[attr-defined]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("tags", "reason"),
    [
        ({"user_id": "ada lovelace"}, "user_id must be"),
        ({"title": "x" * 501}, "title must be"),
        ({"metadata": {"when": object()}}, "not JSON"),
        ({"metadata": {"nan": float("nan")}}, "not JSON"),
        ({"metadata": {"big": "x" * 20_000}}, "bytes as JSON"),
        ({"metadata": ["not", "a", "dict"]}, "dict with str keys"),
    ],
)
async def test_bad_tags_are_refused_and_write_nothing(tags: dict[str, Any], reason: str) -> None:
    from agent_sessions.backends.memory import InMemorySession, InMemoryStore

    session = InMemorySession("chat", store=InMemoryStore())
    catalog = SessionCatalog(session)
    await catalog.tag("chat", title="kept")
    with pytest.raises(InvalidTagError, match=reason):
        await catalog.tag("chat", **tags)
    assert (await catalog.tags("chat"))["title"] == "kept"
    await catalog.tag("chat", title=None)  # unsetting every tag removes the record
    assert (await catalog.stats())["side_stores"] == 0


def test_cli_lists_by_user_and_erases_a_user(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio
    import json

    from agent_sessions import open_session
    from agent_sessions.cli import main

    url, copy = f"sqlite:///{tmp_path / 'app.db'}", f"sqlite:///{tmp_path / 'copy.db'}"

    async def fill() -> None:
        async with await open_session(url, "a1") as session:
            catalog = SessionCatalog(session)  # type: ignore[arg-type]
            for sid, user, title in [
                ("a1", "ada", "Trip"),
                ("a2", "ada", "Tax"),
                ("b1", "bob", "Cats"),
            ]:
                async with await open_session(url, sid) as chat:
                    await chat.add_items([_msg(f"hi from {user}")])
                await catalog.tag(sid, user_id=user, title=title, metadata={"tier": len(sid)})
            async with await Memory.open(url, agent_id="helper", user_id="ada") as memory:
                await memory.blocks.define("human", "Ada")

    asyncio.run(fill())
    assert main(["list", url, "--user", "ada"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(r[0], r[4], r[5]) for r in rows] == [("a1", "ada", "Trip"), ("a2", "ada", "Tax")]
    assert main(["list", url, "--meta", "tier=2", "--json"]) == 0
    assert [json.loads(line)["title"] for line in capsys.readouterr().out.splitlines()] == [
        "Trip",
        "Tax",
        "Cats",
    ]
    assert main(["show", url, "b1"]) == 0
    assert '"title": "Cats"' in capsys.readouterr().err
    assert main(["copy", url, copy]) == 0  # the info travels with the session
    assert "copied 4 session(s) and 5 side store(s)" in capsys.readouterr().out  # a scope too
    assert main(["list", copy, "--user", "bob", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "Cats"

    assert main(["delete", url, "--user", "ada", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        "would erase session 'a1'" in out and "would erase memory scope 'memory:helper:ada'" in out
    )
    assert main(["delete", url, "--user", "ada", "--yes", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["sessions"], done["memory_scopes"]) == (["a1", "a2"], ["memory:helper:ada"])
    assert main(["list", url, "--json"]) == 0
    assert [json.loads(line)["session_id"] for line in capsys.readouterr().out.splitlines()] == [
        "b1"
    ]
    assert main(["stats", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["side_stores_by_kind"] == {
        "info": {"stores": 1, "items": 1}
    }


@pytest.mark.asyncio
async def test_a_v03_scope_is_erased_with_its_user_and_a_conversation_of_that_name_is_not() -> None:
    from agent_sessions.backends.memory import InMemorySession, InMemoryStore

    store = InMemoryStore()
    legacy = InMemorySession("memory:helper:ada", store=store)  # v0.3's scope id
    await Memory(legacy).blocks.define("human", "Ada")
    chat = InMemorySession("memory:chat:ada", store=store)  # a conversation, named alike
    await chat.add_items([_msg("not a scope")])
    catalog = SessionCatalog(legacy)
    done = await erase_user(catalog, "ada")
    assert done.memory_scopes == ["memory:helper:ada"]
    assert await catalog.family("memory:helper:ada") == []
    assert await chat.get_items() == [_msg("not a scope")]
