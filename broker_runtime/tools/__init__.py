"""Kafka's command-line tools (kafka-topics, kafka-reassign-partitions, ...) over the Kafka protocol."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import TextIO


class PipeSafeOutput:
    """A text stream that drops what it cannot write once its reader has gone (`tool ... | head`), as the Java
    PrintStream under Kafka's tools does, so that the command still finishes what it does: `--verify` clears the
    throttles after printing that it will."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self._stream.write(text)
                self._stream.flush()
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.broken = True
        # The interpreter flushes the stream once more on exit: that goes nowhere instead of failing.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def run(main: Callable[[], int]) -> int:
    """A tool's entry point: its standard streams survive a reader that stops early."""
    if sys.stdout is not None:  # None: started with its output closed (`>&-`); print() then writes nothing
        sys.stdout = PipeSafeOutput(sys.stdout)  # type: ignore[assignment]
    if sys.stderr is not None:
        sys.stderr = PipeSafeOutput(sys.stderr)  # type: ignore[assignment]
    return main()
