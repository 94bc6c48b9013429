"""The supervisor of managed clusters (`python manage.py supervise`): desired state in, broker processes out.

Every tick it reads the broker specs of managed clusters and makes the processes match:

- a broker that should run and has no process is started (`python -m broker_runtime --config <its properties>`,
  its own session, output to broker.log, its pid in broker.pid), or adopted if broker.pid names a live process
  running that same properties file (the supervisor was restarted: no duplicate is started);
- a running broker is checked every `health_interval_s`: ApiVersions on its listener and its registration
  /brokers/ids/<id> in ZooKeeper (kazoo), created after the process started (a killed broker's registration
  outlives it until its session expires); a broker that passed and then fails twice in a row is unhealthy;
- a broker whose process ended is started again after a backoff (0.5 s, doubling to 30 s; back to 0.5 s once it
  has been healthy for a minute);
- a broker that should not run (stopped, decommissioned, or its cluster deleted) gets SIGTERM, which is the
  broker's controlled shutdown, and SIGKILL only if it has not exited after `stop_timeout_s`.

Each change is written to the broker's row (state, pid, started_at, restarts, last exit code) and recorded as
a `BrokerEvent`; the console's pages read those. On Ctrl-C (SIGINT or SIGTERM) every broker it runs is stopped
the same way.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from console.clusters import provisioning
from console.clusters.models import BrokerEvent, BrokerState, ManagedBroker

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
#: Healthy this long, a broker's next crash is restarted after the first backoff again.
STABLE_AFTER_S = 60.0
#: Health checks a running broker may fail in a row before it is unhealthy.
FAILED_CHECKS = 2
#: ZooKeeper's clock and ours may differ a little on one machine.
CLOCK_SLACK_S = 1.0


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def api_versions_ready(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if the broker answers ApiVersions v0 (a Kafka request, not just an open port)."""
    import socket

    request = b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff"  # api 18 v0, correlation id 1, null client id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(len(request).to_bytes(4, "big") + request)
            head = s.recv(8)
            return len(head) >= 8 and head[4:8] == b"\x00\x00\x00\x01"
    except OSError:
        return False


class Registrations:
    """Which brokers are registered in ZooKeeper, through one kazoo client per ZooKeeper ensemble."""

    def __init__(self) -> None:
        self._clients: dict[str, object] = {}

    def registered(self, zookeeper_connect: str, broker_id: int, since: float) -> bool | None:
        """True if /brokers/ids/<id> exists and was created at or after `since` (epoch seconds: a registration
        older than the process is the previous process's, alive until its session expires); None when
        ZooKeeper does not answer."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import KazooException
        from kazoo.handlers.threading import KazooTimeoutError

        hosts, _, chroot = zookeeper_connect.partition("/")
        client = self._clients.get(hosts)
        try:
            if client is None:
                client = KazooClient(hosts=hosts, timeout=5.0)
                client.start(timeout=5.0)
                self._clients[hosts] = client
            path = f"/{chroot}/brokers/ids/{broker_id}" if chroot else f"/brokers/ids/{broker_id}"
            stat = client.exists(path)
            return stat is not None and stat.ctime / 1000 >= since - CLOCK_SLACK_S
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("ZooKeeper %s: %s", hosts, exc)
            return None

    def close(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.stop()
                client.close()
        self._clients.clear()


@dataclass
class Tracked:
    """A broker process the supervisor knows: started by it (`popen`) or adopted (`popen` None)."""

    pid: int | None = None
    popen: subprocess.Popen | None = None
    started: float = 0.0  # monotonic
    started_epoch: float = 0.0  # wall clock, to tell this process's ZooKeeper registration from an older one
    healthy_since: float | None = None
    ever_healthy: bool = False
    failed_checks: int = 0
    next_check: float = 0.0
    restart_at: float | None = None  # set while exited and waiting for the backoff
    backoff_s: float = FIRST_BACKOFF_S
    stop_sent_at: float | None = None

    def exit_code(self) -> tuple[bool, int | None]:
        """(exited, exit code if known). An adopted process is not our child: its code is unknown."""
        if self.pid is None:
            return True, None
        if self.popen is not None:
            code = self.popen.poll()
            return code is not None, code
        try:
            proc = psutil.Process(self.pid)
            return proc.status() == psutil.STATUS_ZOMBIE, None
        except psutil.NoSuchProcess:
            return True, None


def pid_file(broker: ManagedBroker) -> Path:
    return provisioning.broker_dir(broker) / "broker.pid"


def _adoptable(broker: ManagedBroker) -> tuple[int, float] | None:
    """(pid, start time) of a live process running this broker's properties, named by its pid file."""
    try:
        pid = int(pid_file(broker).read_text().strip())
        proc = psutil.Process(pid)
        command = proc.cmdline()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except (OSError, ValueError, psutil.Error):
        return None
    properties = str(provisioning.broker_dir(broker) / "server.properties")
    if "broker_runtime" in command and properties in command:
        return pid, proc.create_time()
    return None


class Supervisor:
    def __init__(
        self,
        *,
        tick_s: float = 0.25,
        health_interval_s: float = 1.0,
        stop_timeout_s: float = 60.0,
    ) -> None:
        self.tick_s = tick_s
        self.health_interval_s = health_interval_s
        self.stop_timeout_s = stop_timeout_s
        self.tracked: dict[int, Tracked] = {}  # ManagedBroker pk -> process
        self.registrations = Registrations()

    # -- the loop

    def run(self, stopping: Callable[[], bool]) -> None:
        try:
            while not stopping():
                close_old_connections()
                try:
                    self.reconcile()
                except Exception:  # a database hiccup must not take every broker down with the supervisor
                    log.exception("reconciling failed; trying again")
                time.sleep(self.tick_s)
        finally:
            self.stop_all()
            self.registrations.close()

    def reconcile(self) -> None:
        specs = ManagedBroker.objects.filter(cluster__managed=True).exclude(cluster__data_dir="")
        seen = set()
        for broker in specs.select_related("cluster"):
            seen.add(broker.pk)
            if broker.should_run and not broker.decommissioned:
                self._keep_running(broker)
            else:
                self._keep_stopped(broker)
        for pk in set(self.tracked) - seen:  # its cluster or spec was deleted
            self._stop_orphan(pk)

    # -- a broker that should run

    def _keep_running(self, broker: ManagedBroker) -> None:
        now = time.monotonic()
        tracked = self.tracked.get(broker.pk)
        if tracked is None:
            adopted = _adoptable(broker)
            if adopted is not None:
                pid, created = adopted
                self.tracked[broker.pk] = Tracked(pid=pid, started=now, started_epoch=created)
                started_at = dt.datetime.fromtimestamp(created, tz=dt.UTC)
                self._set(broker, BrokerState.STARTING, pid=pid, started_at=started_at)
                self._event(broker, "adopted", pid=pid, detail="already running (from its pid file)")
                return
            self._start(broker, Tracked(), restarted=False)
            return
        if tracked.stop_sent_at is not None:  # asked to run again while stopping: let it stop first
            self._keep_stopped(broker)
            return
        if tracked.restart_at is not None:
            if now >= tracked.restart_at:
                self._start(broker, tracked, restarted=True)
            return
        exited, code = tracked.exit_code()
        if exited:
            pid = tracked.pid
            if tracked.healthy_since is not None and now - tracked.healthy_since >= STABLE_AFTER_S:
                tracked.backoff_s = FIRST_BACKOFF_S
            tracked.restart_at = now + tracked.backoff_s
            detail = f"restarting in {tracked.backoff_s:g} s"
            tracked.backoff_s = min(MAX_BACKOFF_S, tracked.backoff_s * 2)
            tracked.pid, tracked.popen, tracked.healthy_since = None, None, None
            self._set(broker, BrokerState.EXITED, pid=None, last_exit_code=code)
            self._event(broker, "exited", pid=pid, exit_code=code, detail=detail)
            return
        if now >= tracked.next_check:
            tracked.next_check = now + self.health_interval_s
            self._check(broker, tracked, now)

    def _start(self, broker: ManagedBroker, tracked: Tracked, *, restarted: bool) -> None:
        properties = provisioning.write_properties(broker)
        for log_dir in broker.log_dirs.split(","):
            Path(log_dir).mkdir(parents=True, exist_ok=True)
        directory = provisioning.broker_dir(broker)
        with open(directory / "broker.log", "ab") as output:
            popen = subprocess.Popen(
                [sys.executable, "-m", "broker_runtime", "--config", str(properties)],
                cwd=settings.BASE_DIR,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                start_new_session=True,  # Ctrl-C in the supervisor's terminal reaches the supervisor only
            )
        pid_file(broker).write_text(f"{popen.pid}\n")
        now = time.monotonic()
        tracked.pid, tracked.popen, tracked.started = popen.pid, popen, now
        tracked.started_epoch = time.time()
        tracked.restart_at, tracked.healthy_since, tracked.failed_checks = None, None, 0
        tracked.ever_healthy, tracked.next_check = False, now + 0.2
        self.tracked[broker.pk] = tracked
        fields = {"pid": popen.pid, "started_at": timezone.now()}
        if restarted:
            broker.restarts += 1
            fields["restarts"] = broker.restarts
        self._set(broker, BrokerState.STARTING, **fields)
        self._event(broker, "restarted" if restarted else "started", pid=popen.pid)

    def _check(self, broker: ManagedBroker, tracked: Tracked, now: float) -> None:
        answering = api_versions_ready(broker.host, broker.port)
        registered = self.registrations.registered(
            broker.cluster.zookeeper_connect, broker.broker_id, tracked.started_epoch
        )
        if answering and registered:
            tracked.failed_checks = 0
            if tracked.healthy_since is None:
                tracked.healthy_since = now
                tracked.ever_healthy = True
                self._set(broker, BrokerState.RUNNING)
                self._event(broker, "healthy", pid=tracked.pid, detail="answers ApiVersions, registered")
            return
        tracked.failed_checks += 1
        if tracked.ever_healthy and tracked.failed_checks == FAILED_CHECKS:
            tracked.healthy_since = None
            problems = []
            if not answering:
                problems.append("does not answer ApiVersions")
            if registered is None:
                problems.append("ZooKeeper does not answer")
            elif not registered:
                problems.append(f"not registered at /brokers/ids/{broker.broker_id}")
            self._set(broker, BrokerState.UNHEALTHY)
            self._event(broker, "unhealthy", pid=tracked.pid, detail="; ".join(problems))

    # -- a broker that should not run

    def _keep_stopped(self, broker: ManagedBroker) -> None:
        tracked = self.tracked.get(broker.pk)
        if tracked is None:
            adopted = _adoptable(broker)
            if adopted is None:
                if broker.state != BrokerState.STOPPED and broker.state != BrokerState.PENDING:
                    self._set(broker, BrokerState.STOPPED, pid=None)
                return
            tracked = self.tracked[broker.pk] = Tracked(pid=adopted[0])
        exited, code = tracked.exit_code()
        if exited or tracked.restart_at is not None:
            pid = tracked.pid
            del self.tracked[broker.pk]
            self._set(broker, BrokerState.STOPPED, pid=None, last_exit_code=code)
            if pid is not None:
                self._event(broker, "stopped", pid=pid, exit_code=code)
            return
        now = time.monotonic()
        if tracked.stop_sent_at is None:
            tracked.stop_sent_at = now
            self._signal(tracked.pid, signal.SIGTERM)
            self._set(broker, BrokerState.STOPPING)
            self._event(broker, "stopping", pid=tracked.pid, detail="SIGTERM: controlled shutdown")
        elif now - tracked.stop_sent_at > self.stop_timeout_s:
            self._signal(tracked.pid, signal.SIGKILL)
            self._event(
                broker, "killed", pid=tracked.pid, detail=f"still running after {self.stop_timeout_s:g} s"
            )
            tracked.stop_sent_at = now

    def _stop_orphan(self, pk: int) -> None:
        tracked = self.tracked.pop(pk)
        if tracked.pid is not None and not tracked.exit_code()[0]:
            self._signal(tracked.pid, signal.SIGTERM)
            self._wait([tracked])

    def stop_all(self) -> None:
        """Controlled shutdown of every broker this supervisor runs: SIGTERM to all, then wait for all."""
        running = {pk: t for pk, t in self.tracked.items() if t.pid is not None and not t.exit_code()[0]}
        for tracked in running.values():
            self._signal(tracked.pid, signal.SIGTERM)
        if running:
            log.info("stopping %d broker(s) (controlled shutdown)", len(running))
        self._wait(list(running.values()))
        for broker in ManagedBroker.objects.filter(pk__in=running).select_related("cluster"):
            code = running[broker.pk].exit_code()[1]
            self._set(broker, BrokerState.STOPPED, pid=None, last_exit_code=code)
            self._event(
                broker, "stopped", pid=running[broker.pk].pid, exit_code=code, detail="supervisor stopped"
            )
        self.tracked.clear()

    def _wait(self, processes: list[Tracked]) -> None:
        deadline = time.monotonic() + self.stop_timeout_s
        while processes and time.monotonic() < deadline:
            processes = [t for t in processes if not t.exit_code()[0]]
            time.sleep(0.1)
        for tracked in processes:
            self._signal(tracked.pid, signal.SIGKILL)
            if tracked.popen is not None:
                tracked.popen.wait(10)

    @staticmethod
    def _signal(pid: int | None, signum: int) -> None:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    # -- records

    @staticmethod
    def _set(broker: ManagedBroker, state: BrokerState, **fields) -> None:
        fields.update(state=state, state_changed_at=timezone.now())
        ManagedBroker.objects.filter(pk=broker.pk).update(**fields)
        for name, value in fields.items():
            setattr(broker, name, value)

    @staticmethod
    def _event(broker: ManagedBroker, kind: str, *, pid=None, exit_code=None, detail: str = "") -> None:
        BrokerEvent.objects.create(
            broker=broker, kind=kind, pid=pid, exit_code=exit_code, detail=detail[:500]
        )
        extra = [f"pid {pid}"] if pid else []
        if exit_code is not None:
            extra.append(f"exit code {exit_code}")
        log.info("broker %s: %s %s %s", broker, kind, ", ".join(extra), detail)
