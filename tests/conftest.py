"""Test-wide settings."""

from agents import set_tracing_disabled

set_tracing_disabled(True)  # no API key here: keep the SDK from trying to export traces


def pytest_terminal_summary(terminalreporter: object) -> None:
    """Print what the fault-injection tests injected and checked (tests/test_faults.py)."""
    from tests.fault_report import LINES, SEED

    if LINES and SEED:  # only tests/test_faults.py draws from the seed
        terminalreporter.write_line(f"[faults] FAULT_SEED={SEED[0]} replays this run")  # type: ignore[attr-defined]
    for line in LINES:
        terminalreporter.write_line(line)  # type: ignore[attr-defined]
