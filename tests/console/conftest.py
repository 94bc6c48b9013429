"""Fixtures of the console's tests: a real Redis, a real Celery worker, the shared broker registered as a
cluster, personas with each role, and (in browser tests) Debian's chromium driven by Playwright.

Personas (healthchecks' habit): alice is an admin, oscar an operator, victor a viewer, nora has no role.

- ``redis_url``: a redis-server started for the session on a free port (no persistence).
- ``celery_worker``: one ``celery -A console worker`` process for the session, on that Redis and on the test
  database (a file, so the worker opens the same one). Tests that need it use ``transactional_db`` (their
  writes must be committed for the worker to see them).
- ``cluster``: the session's shared broker registered as a cluster named "test".
- ``api(persona)``: a DRF APIClient logged in as the persona.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PERSONAS = {"alice": "admin", "oscar": "operator", "victor": "viewer", "nora": None}
PASSWORD = "correct horse battery staple"
WORKER_START_TIMEOUT_S = 60


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, *, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll `condition()` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout}s (last value {last!r})")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (make install installs Debian's redis-server)"
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            assert proc.poll() is None, f"redis-server exited with {proc.returncode}"
            return False

    wait_for(answers, timeout=20, what="redis-server answering PING")
    url = f"redis://127.0.0.1:{port}/0"
    from console.celery import app

    app.conf.broker_url = url
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def celery_worker(
    redis_url, django_db_setup, django_db_blocker, tmp_path_factory
) -> Iterator[subprocess.Popen]:
    from django.db import connection

    db_name = connection.settings_dict["NAME"]
    assert db_name and db_name != ":memory:" and "mode=memory" not in str(db_name), db_name
    log_path = tmp_path_factory.mktemp("celery") / "worker.log"
    env = dict(
        os.environ,
        DATABASE_URL=f"sqlite:///{db_name}",
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="console.settings",
        PYTHONUNBUFFERED="1",
    )
    log = open(log_path, "wb")  # noqa: SIM115  (the worker writes to it for the whole session)
    proc = subprocess.Popen(
        [
            sys.executable,
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
            "--hostname",
            f"test-worker-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def ready() -> bool:
        assert proc.poll() is None, (
            f"celery worker exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
        )
        return "ready." in log_path.read_text(errors="replace")

    wait_for(ready, timeout=WORKER_START_TIMEOUT_S, interval=0.1, what="celery worker ready")
    proc.log_path = log_path  # type: ignore[attr-defined]
    yield proc
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    log.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and "celery_worker" in getattr(item, "fixturenames", ()):
        worker = item.funcargs.get("celery_worker")
        path = getattr(worker, "log_path", None)
        if path is not None:
            report.sections.append(("celery worker log", path.read_text(errors="replace")[-6000:]))


@pytest.fixture(scope="module", autouse=True)
def _close_cluster_clients():
    """Cluster clients are cached per process; close them after each module (so before the session's broker
    stops): the clusters a module started are gone, and their clients would otherwise retry them, and log it,
    for the rest of the session."""
    yield
    from console.clusters.client import close_all

    close_all()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """A speed knob only: PBKDF2's cost, paid for every persona of every test, would dominate the suite."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def personas(django_user_model):
    from console.access import Role, set_role

    users = {}
    for name, role in PERSONAS.items():
        user = django_user_model.objects.create_user(name, f"{name}@example.com", PASSWORD)
        set_role(user, Role[role.upper()] if role else Role.NONE)
        users[name] = user
    return users


@pytest.fixture
def cluster(db, shared_broker):
    from console.clusters.models import Cluster

    return Cluster.objects.create(name="test", bootstrap_servers=shared_broker.bootstrap)


@pytest.fixture
def api(personas):
    from rest_framework.test import APIClient

    def client_for(persona: str | None) -> APIClient:
        client = APIClient()
        if persona is not None:
            client.force_authenticate(personas[persona])
        return client

    return client_for


@pytest.fixture
def new_topic(cluster, topic_name):
    """Create a topic on the shared broker through the admin client: new_topic(partitions=1, configs=None)."""
    from console.clusters.client import client_for

    def make(partitions: int = 1, configs: dict | None = None, name: str | None = None) -> str:
        name = name or topic_name
        client = client_for(cluster)
        client.create_topic(name, partitions, 1, configs or {}, validate_only=False)
        wait_for(lambda: name in client.metadata(max_age_s=0).topics, what=f"topic {name} in metadata")
        return name

    return make
