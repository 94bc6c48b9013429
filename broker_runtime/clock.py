"""Time as an injected dependency, so that timeouts, long polls and retention can be tested without sleeping.

Reading time: `time_ms()` (wall clock) and `monotonic_ms()`. Waiting on the event loop: `call_later_ms()` is the
one timer primitive; `sleep_ms()` and `wait_ms()` (a future or a deadline, whichever comes first) are built on
it. `Clock` schedules its timers on the running loop; `ManualClock` keeps them and fires those that are due when
a test calls `advance()`, so a 30-second long poll completes the moment a test advances 30 seconds.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable


class TimerHandle:
    __slots__ = ("_cancel",)

    def __init__(self, cancel: Callable[[], None]) -> None:
        self._cancel = cancel

    def cancel(self) -> None:
        self._cancel()


class Clock:
    def time_ms(self) -> int:
        """Wall-clock milliseconds: record timestamps, retention, expiry."""
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds: timeouts and intervals."""
        return time.monotonic_ns() // 1_000_000

    def call_later_ms(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        """Run `callback` on the event loop after `delay_ms` of monotonic time."""
        handle = asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback)
        return TimerHandle(handle.cancel)

    async def sleep_ms(self, delay_ms: float) -> None:
        waker = asyncio.get_running_loop().create_future()
        timer = self.call_later_ms(delay_ms, lambda: waker.done() or waker.set_result(None))
        try:
            await waker
        finally:
            timer.cancel()

    async def wait_ms(self, future: asyncio.Future, timeout_ms: float) -> bool:
        """Wait until `future` is done or `timeout_ms` has passed; True when it is done. The future is left as
        it is either way (not cancelled on timeout); cancelling the waiter cancels only the wait."""
        if future.done():
            return True
        if timeout_ms <= 0:
            return False
        waker = asyncio.get_running_loop().create_future()

        def wake(_: object = None) -> None:
            if not waker.done():
                waker.set_result(None)

        future.add_done_callback(wake)
        timer = self.call_later_ms(timeout_ms, wake)
        try:
            await waker
        finally:
            timer.cancel()
            future.remove_done_callback(wake)
        return future.done()


class ManualClock(Clock):
    """Time moves only when a test calls `advance()`; timers that fall due then run, in deadline order."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._wall = start_ms
        self._mono = 0
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._seq = itertools.count()

    def time_ms(self) -> int:
        return self._wall

    def monotonic_ms(self) -> int:
        return self._mono

    def call_later_ms(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        seq = next(self._seq)
        heapq.heappush(self._timers, (self._mono + max(delay_ms, 0), seq, callback))
        return TimerHandle(lambda: self._cancelled.add(seq))

    def pending_timers(self) -> int:
        """Timers scheduled and neither fired nor cancelled (what a test can wait for before advancing)."""
        return sum(1 for _, seq, _ in self._timers if seq not in self._cancelled)

    def advance(self, ms: int) -> None:
        target = self._mono + ms
        while self._timers and self._timers[0][0] <= target:
            deadline, seq, callback = heapq.heappop(self._timers)
            if seq in self._cancelled:
                self._cancelled.discard(seq)
                continue
            step = int(deadline) - self._mono
            self._mono += step
            self._wall += step
            callback()
        self._wall += target - self._mono
        self._mono = target
