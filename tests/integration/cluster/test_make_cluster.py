"""`make cluster` (deploy/cluster.py) run in a terminal as a user runs it: a broker killed with kill -9 is reported
once while the others go on, Enter starts it again, Ctrl-C stops everything the run started."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.conftest import free_port_range

pytestmark = pytest.mark.odradek_only

REPO = Path(__file__).resolve().parents[3]
DEADLINE_S = 90.0


class Terminal:
    """The pseudo-terminal `make cluster` runs in: what it printed, and keys typed into it. Its reader thread alone
    reads and closes the terminal's master side, so no read or write ever lands on a descriptor reused after a
    close."""

    def __init__(self, master: int) -> None:
        self._master = master
        self.text = ""
        self._changed = threading.Condition()
        self._hang_up = threading.Event()
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while not self._hang_up.is_set():
                if not select.select([self._master], [], [], 0.1)[0]:
                    continue
                try:
                    chunk = os.read(self._master, 4096)
                except OSError:  # EIO: no process has the terminal open any more
                    return
                if not chunk:
                    return
                with self._changed:
                    self.text += chunk.decode(errors="replace").replace("\r\n", "\n")
                    self._changed.notify_all()
        finally:
            with self._changed:
                os.close(self._master)
                self._closed = True

    def wait_for(self, text: str, count: int = 1) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self.text.count(text) >= count, DEADLINE_S):
                raise AssertionError(f"{text!r} not printed; the terminal shows:\n{self.text}")

    def type(self, keys: bytes) -> None:
        with (
            self._changed
        ):  # the reader closes the master side holding it, so this never writes to a reused fd
            assert not self._closed, "the terminal is closed"
            os.write(self._master, keys)

    def close(self) -> None:
        """The terminal window closes: its processes get SIGHUP."""
        self._hang_up.set()
        self._reader.join(DEADLINE_S)


def processes_using(path: Path) -> dict[int, str]:
    """Live processes whose command line names `path`: pid -> command line."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(path) in cmdline:
                found[int(entry)] = cmdline
    return found


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@contextlib.contextmanager
def cluster_in_terminal(zookeeper, data: Path) -> Iterator[tuple[subprocess.Popen, Terminal]]:
    """`deploy/cluster.py` on the session's ZooKeeper, its data in `data`, in a pseudo-terminal that is the
    controlling terminal of the run's own session (as a shell's is), so that Ctrl-C, a hang-up and the foreground
    check behave as they do for a user. Whatever the test leaves running is killed after it."""
    ports = free_port_range(6)  # the brokers' listeners, then their metrics
    command = [sys.executable, "deploy/cluster.py", "--base-port", str(ports), "--metrics-base-port", str(ports + 3),
               "--zookeeper-port", str(zookeeper.port), "--data-dir", str(data)]  # fmt: skip
    take_terminal = "; ".join([
        "import fcntl, os, sys, termios", "fcntl.ioctl(0, termios.TIOCSCTTY, 0)", "os.execv(sys.argv[1], sys.argv[1:])"
    ])  # fmt: skip
    master, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", take_terminal, *command], cwd=REPO, stdin=follower,
                            stdout=follower, stderr=follower, start_new_session=True)  # fmt: skip
    os.close(follower)
    terminal = Terminal(master)
    try:
        terminal.wait_for("cluster of 3 brokers running")
        yield proc, terminal
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(DEADLINE_S)
        for pid in processes_using(data):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        terminal.close()


def test_make_cluster_reports_a_killed_broker_starts_it_again_on_enter_and_stops_on_ctrl_c(
    zookeeper, tmp_path: Path
) -> None:
    data = tmp_path / "cluster"
    zk = KazooClient(hosts=zookeeper.address)
    zk.start()
    try:
        with cluster_in_terminal(zookeeper, data) as (proc, terminal):

            def registered() -> set[int]:
                return {int(i) for i in zk.get_children("/odradek/brokers/ids")}

            wait_until(lambda: registered() == {0, 1, 2}, "every broker registered")  # after answering
            (broker_1,) = processes_using(data / "broker-1" / "logs")
            os.kill(broker_1, signal.SIGKILL)
            terminal.wait_for("broker 1 exited with code -9")
            wait_until(
                lambda: registered() == {0, 2}, "broker 1's session to expire"
            )  # many rounds of the loop
            assert proc.poll() is None, terminal.text
            assert terminal.text.count("exited with code") == 1
            assert "press Enter to start it again" in terminal.text

            terminal.type(b"\n")
            terminal.wait_for("starting broker 1 again")
            wait_until(lambda: registered() == {0, 1, 2}, "broker 1 registered again")

            terminal.type(b"\x03")  # Ctrl-C: SIGINT to the terminal's foreground process group
            assert proc.wait(DEADLINE_S) == 0, terminal.text
            terminal.wait_for("stopped")
            assert processes_using(data) == {}
            assert zookeeper.alive  # a ZooKeeper the run did not start is left running
    finally:
        zk.stop()
        zk.close()


def test_make_cluster_stops_what_it_started_when_its_terminal_goes_away(zookeeper, tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    with cluster_in_terminal(zookeeper, data) as (proc, terminal):
        terminal.close()
        proc.wait(DEADLINE_S)
        wait_until(lambda: processes_using(data) == {}, "the brokers stopped")
