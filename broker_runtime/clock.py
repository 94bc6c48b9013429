"""Time as an injected dependency, so that timeouts and retention can be tested without sleeping."""

import time


class Clock:
    def time_ms(self) -> int:
        """Wall-clock milliseconds: record timestamps, retention, expiry."""
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds: timeouts and intervals."""
        return time.monotonic_ns() // 1_000_000


class ManualClock(Clock):
    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._wall = start_ms
        self._mono = 0

    def time_ms(self) -> int:
        return self._wall

    def monotonic_ms(self) -> int:
        return self._mono

    def advance(self, ms: int) -> None:
        self._wall += ms
        self._mono += ms
