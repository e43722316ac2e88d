"""Layers over any Session: each takes an inner session and is itself a session."""
