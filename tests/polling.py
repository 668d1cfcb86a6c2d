"""Waiting in tests for what another process does: a predicate polled until it holds."""

import time


def wait_until(predicate, seconds: float, interval: float = 0.05) -> bool:
    """Whether ``predicate()`` came true within ``seconds`` (checked every ``interval``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
