"""Test-wide settings."""

from agents import set_tracing_disabled

set_tracing_disabled(True)  # no API key here: keep the SDK from trying to export traces
