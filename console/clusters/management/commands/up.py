"""`python manage.py up` (what `make up` runs): the whole local platform in the foreground until Ctrl-C.

Starts Redis if nothing answers on REDIS_URL and ZooKeeper if nothing answers on CONSOLE_ZOOKEEPER, migrates
the database, creates the admin user on the first run and provisions the local three-broker cluster through the
console's own provisioning path (`do_provision_cluster`), then runs the supervisor (`manage.py supervise`, which
starts and watches the brokers), the console (runserver), a Celery worker and Celery beat. Ctrl-C (or SIGTERM)
stops what it started, in reverse order; the supervisor stops the brokers with a controlled shutdown. A second
run reuses the same data, users and cluster.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
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

from console.clusters.actions import do_provision_cluster, do_register_cluster
from console.clusters.models import Cluster
from console.clusters.supervisor import answers

REPO = Path(settings.BASE_DIR)
VAR = REPO / "var"


#: The local cluster `make up` provisions on its first run (and the supervisor runs on every run).
LOCAL_CLUSTER = {
    "name": "local", "brokers": 3, "base_port": 9092, "chroot": "/odradek", "metrics_base_port": 9644,
}
ZOOKEEPER_DATA = VAR / "zookeeper"

CONSOLE_ADDRESS = "127.0.0.1:8000"
ADMIN_USERNAME = "admin"
PASSWORD_FILE = Path(settings.VAR_DIR) / "admin-password.txt"


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
            self._zookeeper(platform)
            call_command("migrate", interactive=False, verbosity=0)
            password = self._admin()
            cluster = self._local_cluster()
            python = sys.executable
            if cluster.managed:
                supervisor = platform.start(
                    "supervisor",
                    [python, "manage.py", "supervise"],
                    log=VAR / "supervisor.log",
                    stop_timeout=90,
                )
                for host, port in (h.rsplit(":", 1) for h in cluster.bootstrap_list):
                    self._wait(
                        lambda h=host, p=int(port): answers(h, p), f"broker on {host}:{port}", 90, supervisor
                    )
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

    def _zookeeper(self, platform: Platform) -> None:
        host, port = settings.CONSOLE_ZOOKEEPER.split(",")[0].rsplit(":", 1)
        if answers(host, int(port)):
            self.stdout.write(f"  ZooKeeper answers on {host}:{port}: using it\n")
            return
        ZOOKEEPER_DATA.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "deploy/zookeeper.py", "--data-dir", str(ZOOKEEPER_DATA), "--port", port]
        child = platform.start("zookeeper", command, log=ZOOKEEPER_DATA / "zookeeper.out", stop_timeout=20)
        self._wait(lambda: answers(host, int(port)), "ZooKeeper", 60, child)

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

    def _local_cluster(self) -> Cluster:
        """The local cluster, provisioned through the console's own path on the first run. A broker already
        answering on its first port (say, `make cluster`) is registered as an unmanaged cluster instead."""
        cluster = Cluster.objects.filter(name=LOCAL_CLUSTER["name"]).first()
        if cluster is not None:
            return cluster
        host, port = "127.0.0.1", LOCAL_CLUSTER["base_port"]
        admin = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
        if answers(host, port):
            self.stdout.write(f"  a broker answers on {host}:{port}: registering it (not managed)\n")
            return do_register_cluster(admin, name=LOCAL_CLUSTER["name"], bootstrap_servers=f"{host}:{port}",
                                       source="cli")  # fmt: skip
        self.stdout.write(f"  provisioning the local cluster of {LOCAL_CLUSTER['brokers']} brokers\n")
        return do_provision_cluster(admin, source="cli", **LOCAL_CLUSTER)

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
