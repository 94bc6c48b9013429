"""Fixtures for log tests: an in-memory fault-injecting filesystem and a manual clock."""

from __future__ import annotations

import pytest
from log_helpers import LOG_DIR

from broker_runtime.clock import ManualClock
from broker_runtime.log.fs import FaultInjectingFileSystem


@pytest.fixture
def fs() -> FaultInjectingFileSystem:
    filesystem = FaultInjectingFileSystem()
    filesystem.mkdir(LOG_DIR)
    return filesystem


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_700_000_000_000)
