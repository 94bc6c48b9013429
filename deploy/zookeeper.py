"""A standalone ZooKeeper from Debian's `zookeeper` package, run as an ordinary user with its own data dir.

Used by `make cluster` (deploy/cluster.py) and by the test fixtures. No root, no system service: the server runs
from `/usr/share/java/zookeeper.jar` (its manifest names its dependencies) with a generated `zoo.cfg` in the
data dir, logging through slf4j-simple to `<data dir>/zookeeper.log`.

    python deploy/zookeeper.py --data-dir var/zookeeper --port 2181     # foreground until Ctrl-C
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
LOGGER_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperError(RuntimeError):
    pass


def java_executable() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperError("no 'java' on PATH: install Debian's zookeeper package (it brings a JRE)")
    return java


def four_letter_word(host: str, port: int, word: bytes = b"ruok", timeout: float = 1.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


class ZooKeeperServer:
    """One ZooKeeper process on `host:port` with data in `data_dir` (kept across restarts)."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        *,
        host: str = "127.0.0.1",
        tick_ms: int = 500,
        min_session_timeout_ms: int = 1000,
        max_session_timeout_ms: int = 60000,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.host = host
        self.tick_ms = tick_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def connect_string(self, chroot: str = "") -> str:
        return self.address + chroot

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self) -> Path:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_ms}",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    f"minSessionTimeout={self.min_session_timeout_ms}",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,cons",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    "",
                ]
            )
        )
        return cfg

    def command(self) -> list[str]:
        if not ZOOKEEPER_JAR.exists():
            raise ZooKeeperError(f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper package")
        classpath = [str(ZOOKEEPER_JAR)]
        if LOGGER_JAR.exists():
            classpath.append(str(LOGGER_JAR))
        return [
            java_executable(),
            "-Xms64m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            ":".join(classpath),
            MAIN_CLASS,
            str(self.write_config()),
        ]

    def start(self, timeout: float = 60.0, *, new_session: bool = True) -> ZooKeeperServer:
        """Start and wait until it answers `ruok`. `new_session=False` keeps the process in this process group
        (so Ctrl-C in a terminal reaches it too)."""
        if self.alive:
            raise ZooKeeperError("already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=new_session,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited with code {self.proc.returncode} during start-up; see {self.log_path}\n"
                    + self.log_tail()
                )
            with contextlib.suppress(OSError):
                if four_letter_word(self.host, self.port) == b"imok":
                    return self
            time.sleep(0.1)
        self.kill()
        raise ZooKeeperError(
            f"ZooKeeper did not answer on {self.address} within {timeout}s\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a standalone ZooKeeper in the foreground.")
    parser.add_argument("--data-dir", default="var/zookeeper")
    parser.add_argument("--port", type=int, default=2181)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    server = ZooKeeperServer(Path(args.data_dir), args.port, host=args.host)
    try:
        server.start(new_session=False)
    except ZooKeeperError as exc:
        print(f"zookeeper: {exc}", file=sys.stderr)
        return 1
    print(f"ZooKeeper on {server.address} (data in {server.data_dir}, log {server.log_path})", flush=True)
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop and server.alive:
        time.sleep(0.5)
    server.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
