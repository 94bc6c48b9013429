"""Timers as data: a keyed deadline queue a coordinator shard owns and its runtime polls.

A timer is a key (a tuple naming what it is for, e.g. ("heartbeat", group_id, member_id)), a deadline on the
monotonic clock and an optional payload. Scheduling a key that is already scheduled replaces it, which is how a
heartbeat pushes its member's session deadline forward. Nothing here runs callbacks: the shard pops what is due
and decides what each expiry means, so tests advance a ManualClock and call `poll_timers()` instead of sleeping.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Timer:
    key: tuple[Hashable, ...]
    deadline_ms: int
    payload: Any = None


class TimerQueue:
    def __init__(self) -> None:
        self._timers: dict[tuple[Hashable, ...], tuple[int, Timer]] = {}
        # Lazy deletion: replaced or cancelled entries stay in the heap until they reach the top.
        self._heap: list[tuple[int, int, tuple[Hashable, ...]]] = []
        self._sequence = itertools.count()

    def schedule(self, key: tuple[Hashable, ...], deadline_ms: int, payload: Any = None) -> None:
        seq = next(self._sequence)
        self._timers[key] = (seq, Timer(key, deadline_ms, payload))
        heapq.heappush(self._heap, (deadline_ms, seq, key))

    def cancel(self, key: tuple[Hashable, ...]) -> None:
        self._timers.pop(key, None)

    def get(self, key: tuple[Hashable, ...]) -> Timer | None:
        entry = self._timers.get(key)
        return entry[1] if entry is not None else None

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> Timer | None:
        """The earliest timer whose deadline is at or before now, removed from the queue; None if none is due."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        _, timer = self._timers.pop(key)
        return timer

    def clear(self) -> None:
        self._timers.clear()
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._timers)

    def keys(self) -> list[tuple[Hashable, ...]]:
        return list(self._timers)

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            _, seq, key = heap[0]
            entry = self._timers.get(key)
            if entry is not None and entry[0] == seq:
                return
            heapq.heappop(heap)
