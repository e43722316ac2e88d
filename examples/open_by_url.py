"""Open a session from a URL (``memory://``, ``sqlite:///file.db``, ``redis://...``, ...).

``python examples/open_by_url.py sqlite:///example.db [SESSION_ID]``
"""

import asyncio
import sys

from agent_sessions import open_session


async def main(url: str, session_id: str = "url-example") -> None:
    session = await open_session(url, session_id)
    await session.add_items([{"role": "user", "content": "hello"}])
    print(await session.get_items(limit=5))
    await session.clear_session()
    close = getattr(session, "close", None)
    if close is not None:
        await close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3] or ["memory://"]))
