"""`make cluster`: a local ZooKeeper and three brokers in the foreground, until Ctrl-C.

ZooKeeper (Debian's package, deploy/zookeeper.py) keeps its data in var/cluster/zookeeper and listens on
127.0.0.1:2181; if a ZooKeeper already answers there it is used and left running. The brokers use
deploy/cluster.properties with `zookeeper.connect=127.0.0.1:2181/odradek`, listen on 127.0.0.1:9092-9094, serve
Prometheus metrics at http://127.0.0.1:9644-9646/metrics (odradek.metrics.listener) and keep their logs in
var/cluster/broker-<id> (each broker's output in broker.log there). A second run reuses all of it.
A broker that exits (kill -9 of a leader, to watch the failover) is reported and the others go on; Enter, typed in
the terminal, starts it again. Ctrl-C (or SIGTERM, or the terminal closing) stops the brokers with a controlled
shutdown, then ZooKeeper if this script started it.

    python deploy/cluster.py [--brokers 3] [--base-port 9092] [--metrics-base-port 9644] [--zookeeper-port 2181]
                             [--data-dir var/cluster]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.zookeeper import ZooKeeperError, ZooKeeperServer, four_letter_word  # noqa: E402

CHROOT = "/odradek"
READY_TIMEOUT_S = 60


def zookeeper_answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError):
        return four_letter_word(host, port) == b"imok"
    return False


def api_versions_ready(host: str, port: int) -> bool:
    """True once the broker answers ApiVersions v0."""
    request = b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00"  # api 18 v0, correlation id 1, null client id
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.settimeout(2)
            s.sendall(len(request).to_bytes(4, "big") + request)
            return len(s.recv(8)) >= 8
    except OSError:
        return False


def say(text: str) -> None:
    """Print, unless the terminal has gone (the run is then stopping, and must still stop what it started)."""
    with contextlib.suppress(OSError):
        print(text, flush=True)


def enter_pressed(timeout: float) -> bool:
    """Waits up to `timeout` for a line typed on the terminal. Only while this process is in the terminal's
    foreground: a background process reading it would be stopped (SIGTTIN), and `make cluster &` must go on."""
    try:
        foreground = os.tcgetpgrp(0) == os.getpgrp()
    except OSError:  # not a terminal
        foreground = False
    if not foreground:
        time.sleep(timeout)
        return False
    if not select.select([0], [], [], timeout)[0]:
        return False
    return os.read(0, 1024) != b""  # a line (a key, if the terminal is not in line mode); b"": closed


class BrokerChild:
    def __init__(
        self, broker_id: int, port: int, metrics_port: int, data_dir: Path, zookeeper_connect: str
    ) -> None:
        self.broker_id = broker_id
        self.port = port
        self.metrics_port = metrics_port
        self.dir = data_dir / f"broker-{broker_id}"
        self.zookeeper_connect = zookeeper_connect
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        listener = f"PLAINTEXT://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "broker_runtime", "--config", str(REPO / "deploy" / "cluster.properties"),
            "--override", f"broker.id={self.broker_id}",
            "--override", f"listeners={listener}",
            "--override", f"advertised.listeners={listener}",
            "--override", f"log.dirs={self.dir / 'logs'}",
            "--override", f"zookeeper.connect={self.zookeeper_connect}",
            "--override", f"odradek.metrics.listener=http://127.0.0.1:{self.metrics_port}",
        ]  # fmt: skip
        with open(self.dir / "broker.log", "ab") as log:
            self.proc = subprocess.Popen(
                command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True,
            )  # fmt: skip

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run ZooKeeper and a cluster of brokers in the foreground.")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--base-port", type=int, default=9092)
    parser.add_argument("--metrics-base-port", type=int, default=9644)
    parser.add_argument("--zookeeper-port", type=int, default=2181)
    parser.add_argument("--data-dir", default=str(REPO / "var" / "cluster"))
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir).resolve()
    zk_address = f"127.0.0.1:{args.zookeeper_port}"
    zookeeper_connect = zk_address + CHROOT

    zookeeper = None
    if zookeeper_answers("127.0.0.1", args.zookeeper_port):
        print(f"ZooKeeper already answers on {zk_address}: using it", flush=True)
    else:
        zookeeper = ZooKeeperServer(data_dir / "zookeeper", args.zookeeper_port)
        try:
            zookeeper.start(new_session=True)
        except ZooKeeperError as exc:
            print(f"cluster: {exc}", file=sys.stderr)
            return 1
        except BaseException:  # Ctrl-C while it starts: it runs in a session of its own, so stop it here
            zookeeper.stop()
            raise

    brokers = [
        BrokerChild(i, args.base_port + i, args.metrics_base_port + i, data_dir, zookeeper_connect)
        for i in range(args.brokers)
    ]
    stopping = False

    def on_signal(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # the terminal went away (unless under nohup)
        signal.signal(signal.SIGHUP, on_signal)
    interactive = os.isatty(0)
    try:
        for broker in brokers:
            broker.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not stopping and not all(api_versions_ready("127.0.0.1", b.port) for b in brokers):
            dead = [b for b in brokers if not b.alive]
            if dead or time.monotonic() > deadline:
                for b in dead or brokers:
                    print(f"broker {b.broker_id} did not start; see {b.dir / 'broker.log'}", file=sys.stderr)
                stopping = True
                break
            time.sleep(0.2)
        if not stopping:
            bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
            print(f"cluster of {len(brokers)} brokers running", flush=True)
            print(f"  bootstrap servers: {bootstrap}", flush=True)
            print(f"  zookeeper.connect: {zookeeper_connect}   (zkCli.sh -server {zk_address}, then ls {CHROOT})",
                  flush=True)  # fmt: skip
            print(f"  data and logs:     {data_dir}   (Ctrl-C stops everything)", flush=True)
        while not stopping:
            for b in brokers:
                if b.proc is not None and not b.alive:  # reported once; the others go on, as a cluster does
                    print(f"broker {b.broker_id} exited with code {b.proc.returncode}; see {b.dir / 'broker.log'}"
                          + ("; press Enter to start it again" if interactive else ""),
                          file=sys.stderr, flush=True)  # fmt: skip
                    b.proc = None
            if enter_pressed(0.5):
                for b in brokers:
                    if b.proc is None:
                        print(f"starting broker {b.broker_id} again", flush=True)
                        b.start()
    finally:  # whatever ends the run, no broker or ZooKeeper of it is left running
        say("stopping the brokers (controlled shutdown)...")
        for b in brokers:
            b.stop()
        codes = [b.wait(60) for b in brokers]
        if zookeeper is not None:
            zookeeper.stop()
        say("stopped")
    return 0 if all(code in (0, None) for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
