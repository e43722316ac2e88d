"""Encrypt every stored item and let it expire: ``EncryptedSession`` with ``ttl=``.

The agent sees plaintext; the store underneath only ever holds envelopes (AES-256-GCM, with
the authenticated write time that ``ttl`` is checked against). The script runs two turns, then
reads the inner store directly to show that the first item there carries no trace of the
conversation.

Needs the ``encryption`` extra (``cryptography``). Runs offline with a scripted model:
``python examples/encrypted_ttl.py``.
"""

import asyncio
import json

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message
from cryptography.fernet import Fernet

from agent_sessions import EncryptedSession, SQLiteSession

SECRET = "my card number is 4111 1111 1111 1111"


async def main() -> None:
    set_tracing_disabled(True)
    model = ScriptedModel([[assistant_message("Noted.")], [assistant_message("It ends in 1111.")]])
    agent = Agent(name="vault", instructions="Answer briefly.", model=model)
    store = SQLiteSession("user-7")  # ":memory:" by default; any session works as the store
    key = Fernet.generate_key().decode()  # keep it in a secret manager in real use
    session = EncryptedSession(store, encryption_key=key, ttl=3600)  # items live one hour
    try:
        await Runner.run(agent, f"Remember: {SECRET}", session=session)
        result = await Runner.run(agent, "What does my card number end in?", session=session)
        print("answer:", result.final_output)
        print("decrypted first item:", (await session.get_items(limit=None))[0].get("content"))

        raw = (await store.get_items())[0]
        raw_text = json.dumps(raw)
        print("stored first item:", raw_text[:160] + ("..." if len(raw_text) > 160 else ""))
        print("secret visible in the store:", "4111" in raw_text or "card" in raw_text)
    finally:
        await session.close()


if __name__ == "__main__":
    asyncio.run(main())
