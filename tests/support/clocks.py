"""A clock a test moves by hand, for code that takes its clock as a parameter (the idempotency
ledger's expiries, the roots cache): time passes when the test says so, not while it sleeps."""

from __future__ import annotations


class ManualClock:
    """Seconds as a callable (like `time.time` or `time.monotonic`), moved only by `advance`."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
