"""Optional OpenTelemetry spans for every storage operation (the ``otel`` extra).

The seam lives in :mod:`agent_sessions.core.telemetry` (``BaseSession`` calls it); this is
the public switch. Every span is described there.
"""

from .core.telemetry import WITHHELD, instrument, is_instrumented, uninstrument

__all__ = ["WITHHELD", "instrument", "is_instrumented", "uninstrument"]
