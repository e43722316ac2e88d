"""Open a session from a URL (``memory://``, ``sqlite:///file.db``, ``redis://...``, ...).

``python examples/open_by_url.py sqlite:///example.db [SESSION_ID] [OPTION=VALUE ...]``
(options go to the backend, e.g. ``table_prefix=demo_``).
"""

import asyncio
import sys

from agent_sessions import open_session
from agent_sessions.ops.catalog import SessionCatalog


async def main(url: str, session_id: str = "url-example", *options: str) -> None:
    opts = dict(o.split("=", 1) for o in options)
    async with await open_session(url, session_id, **opts) as session:
        await session.add_items([{"role": "user", "content": "hello"}])
        print(await session.get_items(limit=5))
    # Erase the session (items, counter, metadata row or key), not only its items.
    async with await SessionCatalog.open(url, **opts) as catalog:
        await catalog.delete_sessions([session_id])


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:] or ["memory://"]))
