"""A power cut at every step of a cleaning pass (writing `.cleaned`, renaming to `.swap`, the old files to
`.deleted`, the final names, deleting): the log loads as old or cleaned segments, never losing a latest value."""

from __future__ import annotations

import pytest
from log_helpers import LOG_DIR, PARTITION_DIR
from test_log_cleaner import cleaner_for, contents, fill, latest_values, open_log, produce

from broker_runtime.clock import ManualClock
from broker_runtime.log.fs import FaultInjectingFileSystem


class PowerCut(BaseException):
    """Not an OSError: nothing in the log may catch it, as nothing survives a power cut."""


class CrashingFileSystem(FaultInjectingFileSystem):
    """Cuts the power before the n-th write-like call (write, fsync, rename, unlink, truncate) once armed."""

    def __init__(self) -> None:
        super().__init__()
        self.countdown: int | None = None

    def _step(self) -> None:
        if self.countdown is not None:
            if self.countdown == 0:
                self.countdown = None
                raise PowerCut
            self.countdown -= 1

    def append(self, handle, data, end=None):
        self._step()
        super().append(handle, data, end)

    def pwrite(self, handle, data, position):
        self._step()
        super().pwrite(handle, data, position)

    def fsync(self, handle):
        self._step()
        super().fsync(handle)

    def fsync_dir(self, path):
        self._step()
        super().fsync_dir(path)

    def rename(self, src, dst):
        self._step()
        super().rename(src, dst)

    def unlink(self, path):
        self._step()
        super().unlink(path)

    def truncate(self, handle, size):
        self._step()
        super().truncate(handle, size)


def _prepared():
    fs = CrashingFileSystem()
    fs.mkdir(LOG_DIR)
    clock = ManualClock(start_ms=1_700_000_000_000)
    plog = open_log(fs, clock)
    produce(plog, [(b"lonely", b"never rewritten")])  # a latest value in the first segment
    history = [(0, b"lonely", b"never rewritten"), *fill(plog, rounds=6, keys=5)]
    plog.flush()  # everything durable before the pass: only the cleaner's work is at stake
    return fs, clock, plog, history


@pytest.mark.parametrize("strict_dir_entries", [False, True], ids=["journaled", "strict-posix"])
def test_power_cut_at_every_step_of_a_pass_loses_no_latest_value(strict_dir_entries):
    fs, clock, plog, history = _prepared()
    original = contents(plog)
    expected = sorted((o, k, v) for k, (o, v) in latest_values(history).items())
    cleaner_for(fs, clock, plog).clean_now()
    assert contents(plog) == expected
    steps_seen = 0
    for step in range(10_000):
        fs, clock, plog, _ = _prepared()
        fs.countdown = step
        try:
            cleaner_for(fs, clock, plog).clean_now()
        except PowerCut:
            pass
        else:
            break  # the pass finished before the step: every step has been cut once
        steps_seen += 1
        fs.crash(drop_unsynced_dir_entries=strict_dir_entries)
        reopened = open_log(fs, clock)  # no clean-shutdown marker: recovery from the start
        after = contents(reopened)
        assert set(expected) <= set(after) <= set(original), f"power cut before step {step}"
        assert reopened.log_end_offset == original[-1][0] + 1
        leftovers = [n for n in fs.listdir(PARTITION_DIR) if n.endswith((".cleaned", ".swap", ".deleted"))]
        assert leftovers == []
        # and cleaning again reaches the fully cleaned log
        cleaner_for(fs, clock, reopened).clean_now()
        assert contents(reopened) == expected
    assert steps_seen > 20  # the pass has many steps; each was cut


def test_interrupted_swap_is_finished_at_load():
    """A crash after the `.swap` files were complete and some old files renamed: loading deletes what the swap
    covers and renames the swap files in place (Kafka's LogLoader)."""
    fs, clock, plog, history = _prepared()
    expected = sorted((o, k, v) for k, (o, v) in latest_values(history).items())
    renames = 0
    original_rename = fs.rename

    def rename_then_cut(src, dst):
        nonlocal renames
        original_rename(src, dst)
        renames += 1
        if str(dst).endswith(".deleted") and renames >= 4:
            raise PowerCut

    fs.rename = rename_then_cut
    with pytest.raises(PowerCut):
        cleaner_for(fs, clock, plog).clean_now()
    fs.rename = original_rename
    names = fs.listdir(PARTITION_DIR)
    assert any(n.endswith(".swap") for n in names) and any(n.endswith(".deleted") for n in names)
    fs.crash()
    reopened = open_log(fs, clock)
    after = contents(reopened)
    assert set(expected) <= set(after)
    assert len(after) < len(history)  # the swap that was under way went through
    assert not [n for n in fs.listdir(PARTITION_DIR) if n.endswith((".swap", ".deleted", ".cleaned"))]
