"""`python manage.py up` (what `make up` runs): the whole local platform in the foreground until Ctrl-C.

Starts Redis if nothing answers on REDIS_URL, the local cluster if nothing answers on its bootstrap address,
migrates the database, creates the admin user on the first run, registers the local cluster, then runs the
console (runserver), a Celery worker and Celery beat. Ctrl-C (or SIGTERM) stops what it started, in reverse
order, the brokers last with a controlled shutdown. A second run reuses the same data, users and cluster.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from console.clusters.models import Cluster, ManagedBroker

REPO = Path(settings.BASE_DIR)
VAR = REPO / "var"


@dataclass(frozen=True)
class LocalCluster:
    """How to start the local cluster and where its brokers listen."""

    command: list[str]
    brokers: list[tuple[int, str, int, str]]  # (broker id, host, port, log dir)
    zookeeper_connect: str = ""
    log_name: str = "cluster.log"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{host}:{port}" for _, host, port, _ in self.brokers)


STANDALONE = LocalCluster(
    command=[sys.executable, "-m", "broker_runtime", "--config", "deploy/standalone.properties"],
    brokers=[(0, "127.0.0.1", 9092, "var/standalone/logs")],
    log_name="standalone.log",
)
THREE_BROKERS = LocalCluster(
    command=["make", "--no-print-directory", "cluster"],
    brokers=[(i, "127.0.0.1", 9092 + i, f"var/cluster/broker-{i}") for i in range(3)],
    zookeeper_connect="127.0.0.1:2181",
)

#: The cluster `make up` runs. Switch to THREE_BROKERS once `make cluster` exists.
LOCAL_CLUSTER = STANDALONE

CONSOLE_ADDRESS = "127.0.0.1:8000"
ADMIN_USERNAME = "admin"
PASSWORD_FILE = Path(settings.VAR_DIR) / "admin-password.txt"


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    stop_timeout: float = 15.0


@dataclass
class Platform:
    out: object
    children: list[Child] = field(default_factory=list)

    def start(
        self, name: str, command: list[str], *, log: Path | None = None, stop_timeout: float = 15.0
    ) -> Child:
        stdout = open(log, "ab") if log else None  # noqa: SIM115  (closed with the process)
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=stdout,
            stderr=subprocess.STDOUT if log else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        child = Child(name, proc, stop_timeout)
        self.children.append(child)
        self.out.write(f"  started {name} (pid {proc.pid}){f', log in {log}' if log else ''}\n")
        return child

    def stop_all(self) -> None:
        for child in reversed(self.children):
            if child.proc.poll() is not None:
                continue
            self.out.write(f"  stopping {child.name} (pid {child.proc.pid})\n")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.proc.pid, signal.SIGTERM)
            try:
                child.proc.wait(timeout=child.stop_timeout)
            except subprocess.TimeoutExpired:
                self.out.write(f"  {child.name} did not stop within {child.stop_timeout:.0f} s: killing it\n")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()


class Command(BaseCommand):
    help = "Run the local platform (Redis, the local cluster, console, Celery worker and beat) until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--address", default=CONSOLE_ADDRESS, help="host:port of the console")

    def handle(self, *args, address: str, **options):
        platform = Platform(self.stdout)
        stopping = False

        def on_signal(signum, _frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        try:
            self.stdout.write("Odradek: starting the local platform\n")
            self._redis(platform)
            cluster_child = self._cluster(platform)
            call_command("migrate", interactive=False, verbosity=0)
            password = self._admin()
            cluster = self._register(cluster_child)
            python = sys.executable
            platform.start("console", [python, "manage.py", "runserver", address, "--noreload"])
            platform.start(
                "celery worker",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "console",
                    "worker",
                    "--pool",
                    "threads",
                    "--concurrency",
                    "4",
                    "--loglevel",
                    "INFO",
                ],
                stop_timeout=30,
            )
            platform.start(
                "celery beat", [python, "-m", "celery", "-A", "console", "beat", "--loglevel", "INFO"]
            )
            self._banner(address, password, cluster)
            while not stopping:
                for child in platform.children:
                    if child.proc.poll() is not None:
                        raise CommandError(f"{child.name} exited with code {child.proc.returncode}")
                time.sleep(0.5)
        finally:
            self.stdout.write("\nOdradek: stopping\n")
            platform.stop_all()
            self.stdout.write("Odradek: stopped\n")

    def _redis(self, platform: Platform) -> None:
        url = urlparse(settings.REDIS_URL)
        host, port = url.hostname or "127.0.0.1", url.port or 6379
        if answers(host, port):
            self.stdout.write(f"  Redis answers on {host}:{port}: using it\n")
            return
        if host not in ("127.0.0.1", "localhost"):
            raise CommandError(f"REDIS_URL points at {host}:{port}, which does not answer")
        binary = shutil.which("redis-server")
        if binary is None:
            raise CommandError("redis-server is not installed (make install installs it)")
        data = VAR / "redis"
        data.mkdir(parents=True, exist_ok=True)
        platform.start(
            "redis", [binary, "--port", str(port), "--bind", host, "--dir", str(data)], log=data / "redis.log"
        )
        self._wait(lambda: answers(host, port), "Redis", 20)

    def _cluster(self, platform: Platform) -> Child | None:
        local = LOCAL_CLUSTER
        first = local.brokers[0]
        if answers(first[1], first[2]):
            self.stdout.write(f"  a broker answers on {first[1]}:{first[2]}: using it\n")
            return None
        for _, _, _, log_dir in local.brokers:
            (REPO / log_dir).mkdir(parents=True, exist_ok=True)
        child = platform.start("local cluster", local.command, log=VAR / local.log_name, stop_timeout=60)
        for _, host, port, _ in local.brokers:
            self._wait(lambda h=host, p=port: answers(h, p), f"broker on {host}:{port}", 90, child)
        return child

    def _wait(self, ready, what: str, timeout: float, child: Child | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if child is not None and child.proc.poll() is not None:
                raise CommandError(f"{child.name} exited with code {child.proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise CommandError(f"{what} did not answer within {timeout:.0f} s")
            time.sleep(0.2)

    def _admin(self) -> str | None:
        """Create the admin user on the first run; return its password then (None on later runs)."""
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            return None
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(ADMIN_USERNAME, "", password)
        PASSWORD_FILE.write_text(password + "\n")
        PASSWORD_FILE.chmod(0o600)
        return password

    def _register(self, child: Child | None) -> Cluster:
        local = LOCAL_CLUSTER
        cluster, _ = Cluster.objects.get_or_create(
            name="local",
            defaults={
                "bootstrap_servers": local.bootstrap,
                "zookeeper_connect": local.zookeeper_connect,
                "managed": True,
            },
        )
        if child is not None:
            for broker_id, host, port, log_dir in local.brokers:
                ManagedBroker.objects.update_or_create(
                    cluster=cluster,
                    broker_id=broker_id,
                    defaults={
                        "host": host,
                        "port": port,
                        "log_dirs": log_dir,
                        "pid": _broker_pid(child, port),
                        "started_at": timezone.now(),
                    },
                )
        return cluster

    def _banner(self, address: str, password: str | None, cluster: Cluster) -> None:
        self.stdout.write(self.style.SUCCESS(f"\nOdradek console: http://{address}/\n"))
        if password:
            self.stdout.write(f"  log in as {ADMIN_USERNAME} / {password}   (also in {PASSWORD_FILE})\n")
        else:
            self.stdout.write(
                f"  log in as {ADMIN_USERNAME}; the first run's password is in {PASSWORD_FILE}\n"
                f"  (change it with: python manage.py changepassword {ADMIN_USERNAME})\n"
            )
        self.stdout.write(f"  cluster '{cluster.name}' at {cluster.bootstrap_servers}\n")
        self.stdout.write(
            f"  API: http://{address}/api/v1/ (docs at /api/v1/docs/; token: python manage.py drf_create_token USER)\n"
        )
        self.stdout.write("  Ctrl-C stops everything.\n\n")


def _broker_pid(child: Child, port: int) -> int | None:
    """The pid listening on `port`: the child itself for one broker, one of its children for several."""
    try:
        import psutil
    except ImportError:
        return child.proc.pid
    candidates = [psutil.Process(child.proc.pid), *psutil.Process(child.proc.pid).children(recursive=True)]
    for proc in candidates:
        with contextlib.suppress(psutil.Error):
            if any(
                c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
                for c in proc.net_connections("tcp")
            ):
                return proc.pid
    return child.proc.pid
