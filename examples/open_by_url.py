"""Open a session from a URL (``memory://``, ``sqlite:///file.db``, ``redis://...``, ...).

``python examples/open_by_url.py sqlite:///example.db``
"""

import asyncio
import sys

from agent_sessions import open_session


async def main(url: str) -> None:
    session = await open_session(url, "url-example")
    await session.add_items([{"role": "user", "content": "hello"}])
    print(await session.get_items(limit=5))
    await session.clear_session()
    close = getattr(session, "close", None)
    if close is not None:
        await close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "memory://"))
