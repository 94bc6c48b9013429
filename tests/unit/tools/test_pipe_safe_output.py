"""A tool's output to a reader that has gone (`tool ... | head`) is dropped, not raised: the command goes on."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from broker_runtime.tools import PipeSafeOutput


def test_writes_pass_through_while_the_reader_reads() -> None:
    read_fd, write_fd = os.pipe()
    with open(write_fd, "w") as raw, open(read_fd) as reader:
        out = PipeSafeOutput(raw)
        print("Status of partition reassignment:", file=out)
        assert reader.readline() == "Status of partition reassignment:\n"
        assert not out.broken


def test_a_closed_pipe_drops_the_rest_and_the_stream_stays_usable() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    with open(write_fd, "w") as raw:  # its last flush, on closing, goes to /dev/null, not to the closed pipe
        out = PipeSafeOutput(raw)
        print("Clearing broker-level throttles on brokers 0,1,2", file=out)
        assert out.broken
        print("Clearing topic-level throttles on topic t", file=out)  # dropped, not raised
        out.flush()


def test_a_tool_whose_reader_left_exits_with_its_own_code() -> None:
    """The tool's error line goes to a pipe closed before it starts: no traceback, and the tool's exit code (1),
    not the interpreter's for a failed flush (120)."""
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    try:
        done = subprocess.run([sys.executable, "-m", "broker_runtime.tools.topics", "--list",
                               "--bootstrap-server", "127.0.0.1:1"],
                              stdout=write_fd, stderr=subprocess.PIPE, timeout=60)  # fmt: skip
    finally:
        os.close(write_fd)
    assert done.returncode == 1
    assert done.stderr == b""


def test_other_attributes_are_the_wrapped_streams() -> None:
    inner = io.StringIO()
    out = PipeSafeOutput(inner)
    out.write("x")
    assert out.getvalue() == "x"
