#!/usr/bin/env python
"""Managed-service benchmarks (part of `make bench`): supervision, failover and the reassignment throttle.

    python bench/operations.py            # 100 partitions x 10 MB for the failover, 5 kills
    python bench/operations.py --quick    # 10 partitions x 1 MB, 2 kills: checks the script

Targets (issue: managed-service operations):
- a killed broker shows in the console within 5 s (the Brokers page's fragment, as its 2 s poll asks for it,
  no longer says "running"), and the supervisor has restarted it within 10 s (a new process; "in service" is
  also reported: answering and registered again, which waits for the killed broker's ZooKeeper session);
- failover back to the full replication factor for 100 partitions of 10 MB each within 2 minutes: from the kill
  to the failover operation done (grace period 5 s included);
- the reassignment throttle holds the copy rate within 10 % of its setting (a 1-partition move of 40 MB under
  a 4 MB/s throttle, the rate fitted on the bytes the new replica reports in DescribeLogDirs, middle 80 %).

Everything real: ZooKeeper (Debian's package), redis-server, the supervisor (`manage.py supervise`) running three
brokers, a Celery worker; the console's database is a temporary SQLite file. The failover and throttle need
replication between brokers; where the cluster cannot copy replicas the result says so.
Results: bench/results/operations-<UTC time>.json and bench/results/operations-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))


def log(msg: str) -> None:
    sys.stderr.write(f"[operations bench {time.strftime('%H:%M:%S')}] {msg}\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(condition, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not within {timeout:.0f} s")


class Processes:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, command: list[str]) -> subprocess.Popen:
        out = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115  (closed when the process ends)
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(90)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="odradek-operations-bench-"))
    from deploy.zookeeper import ZooKeeperServer

    zookeeper = ZooKeeperServer(workdir / "zookeeper", free_port())
    zookeeper.start()
    redis_port = free_port()
    os.environ.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        CONSOLE_VAR_DIR=str(workdir / "console"),
        CONSOLE_CLUSTERS_DIR=str(workdir / "clusters"),
        CONSOLE_ZOOKEEPER=zookeeper.address,
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        DJANGO_DEBUG="1",
        CONSOLE_LOG_LEVEL="WARNING",
    )
    processes = Processes(workdir)
    processes.start("redis", ["redis-server", "--port", str(redis_port), "--save", "", "--dir", str(workdir)])
    try:
        results = run(processes, quick=args.quick)
    finally:
        processes.stop()
        zookeeper.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    results.update(
        profile="quick" if args.quick else "full",
        machine={"cpus": os.cpu_count()},
        time=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    write(results)


def run(processes: Processes, *, quick: bool) -> dict:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment

    from console.clusters.actions import do_provision_cluster
    from console.clusters.models import ManagedBroker

    setup_test_environment()
    call_command("migrate", verbosity=0)
    admin = get_user_model().objects.create_superuser("bench", "", "bench-password")
    base = free_port()
    while any(_taken(p) for p in range(base, base + 3)):
        base = free_port()
    cluster = do_provision_cluster(admin, name="bench", brokers=3, base_port=base, source="cli")
    python = sys.executable
    processes.start("supervisor", [python, "manage.py", "supervise"])
    processes.start("worker", [python, "-m", "celery", "-A", "console", "worker", "--pool", "threads",
                               "--concurrency", "2", "--without-gossip", "--without-mingle"])  # fmt: skip
    states = lambda: {b.broker_id: b.state for b in ManagedBroker.objects.filter(cluster=cluster)}  # noqa: E731
    wait(lambda: set(states().values()) == {"running"}, 120, "three brokers running")
    web = Client()
    web.force_login(admin)
    results = {"supervision": supervision(cluster, web, kills=2 if quick else 5)}
    partitions, size = (10, 1 << 20) if quick else (100, 10 << 20)
    results["failover"] = failover(cluster, partitions, size)
    results["throttle"] = throttle(cluster, admin, total=8 << 20 if quick else 40 << 20, rate=4 << 20)
    from console.clusters.client import close_all

    close_all()
    return results


def _taken(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def supervision(cluster, web, *, kills: int) -> dict:
    """Kill broker 1 with SIGKILL `kills` times; time what the Brokers page shows and what the supervisor does."""
    import re

    from console.clusters.models import ManagedBroker

    row = re.compile(r'<tr data-broker="1">.*?class="process-state">(.*?)</td>', re.S)

    def shown() -> str:
        html = web.get(f"/clusters/{cluster.pk}/brokers/", HTTP_HX_REQUEST="true").content.decode()
        match = row.search(html)
        return re.sub(r"<[^>]+>", "", match.group(1)).strip() if match else ""

    visible, restarted, in_service = [], [], []
    for i in range(kills):
        broker = ManagedBroker.objects.get(cluster=cluster, broker_id=1)
        assert shown() == "running"
        killed = time.monotonic()
        os.kill(broker.pid, signal.SIGKILL)
        wait(lambda: shown() != "running", 30, "the kill shown")
        visible.append(time.monotonic() - killed)
        old = broker.pid
        wait(lambda b=broker, old=old: (p := ManagedBroker.objects.get(pk=b.pk).pid) and p != old, 60, "a new process")
        restarted.append(time.monotonic() - killed)
        wait(lambda: shown() == "running", 120, "back in service")
        in_service.append(time.monotonic() - killed)
        log(f"kill {i + 1}: shown {visible[-1]:.2f} s, restarted {restarted[-1]:.2f} s, in service {in_service[-1]:.2f} s")
        time.sleep(1)  # a pause between kills, so that the backoff is not what is measured
    return {
        "kills": kills,
        "shown_s": {"median": statistics.median(visible), "max": max(visible)},
        "restarted_s": {"median": statistics.median(restarted), "max": max(restarted)},
        "in_service_s": {"median": statistics.median(in_service), "max": max(in_service)},
        "targets": {"shown_s": 5, "restarted_s": 10},
    }


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                         "batch.size": 1 << 20, "compression.type": "none"})  # fmt: skip
    value = os.urandom(10_000)
    for p in range(partitions):
        for _ in range(per_partition // len(value)):
            while True:
                try:
                    producer.produce(topic, value=value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.1)
    producer.flush(300)


def failover(cluster, partitions: int, size: int) -> dict:
    from kafka.admin import NewTopic

    from console.clusters.client import client_for
    from console.clusters.models import Cluster, ManagedBroker
    from console.operations.models import Operation
    from console.operations.tasks import watch_cluster

    client = client_for(cluster)
    topic = "failover-bench"
    assignment = {p: [p % 3, (p + 1) % 3] for p in range(partitions)}
    client._kafka_python_admin().create_topics([NewTopic(topic, -1, -1, replica_assignments=assignment)])
    wait(lambda: topic in client.metadata(max_age_s=0).topics, 60, "topic created")
    log(f"producing {partitions} x {size >> 20} MB")
    _produce(cluster.bootstrap_servers, topic, partitions, size)
    def caught_up() -> bool:  # every follower holds as many bytes as its leader (the ISR alone says little)
        sizes = client.replica_sizes([topic])
        return all(sizes.get((r[1], topic, p), 0) >= sizes.get((r[0], topic, p), 1) for p, r in assignment.items())

    try:
        wait(caught_up, 60 + partitions * size / (5 << 20), "followers caught up", interval=1)
    except TimeoutError:
        return {"result": "not measurable: the followers never caught up with their leaders (no replication)"}
    Cluster.objects.filter(pk=cluster.pk).update(failover_grace_s=5)
    victim = ManagedBroker.objects.get(cluster=cluster, broker_id=2)
    ManagedBroker.objects.filter(pk=victim.pk).update(should_run=False)
    killed = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)

    def failover_done():
        cluster.refresh_from_db()
        watch_cluster(cluster)
        op = Operation.objects.filter(cluster=cluster, kind="failover").first()
        return op if op and op.is_final else None

    try:
        op = wait(failover_done, 300, "failover done", interval=1)
    except TimeoutError:
        return {"result": "the failover did not finish within 5 minutes"}
    seconds = time.monotonic() - killed
    md = client.metadata(max_age_s=0).topic(topic)
    restored = all(len(p.replicas) == 2 and 2 not in p.replicas and len(p.isr) == 2 for p in md.partitions)
    log(f"failover of {partitions} x {size >> 20} MB: {op.state} in {seconds:.1f} s, RF restored: {restored}")
    return {"partitions": partitions, "bytes_each": size, "state": op.state, "seconds": seconds,
            "replication_factor_restored": restored, "target_s": 120}  # fmt: skip


def throttle(cluster, admin, *, total: int, rate: int) -> dict:
    from kafka.admin import NewTopic

    from console.clusters.client import client_for
    from console.operations.actions import do_approve_operation, do_cancel_operation, do_propose_operation
    from console.operations.models import Operation

    client = client_for(cluster)
    topic = "throttle-bench"
    client._kafka_python_admin().create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [0]})])
    wait(lambda: topic in client.metadata(max_age_s=0).topics, 60, "topic created")
    _produce(cluster.bootstrap_servers, topic, 1, total)
    plan = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [0, 1]}]}
    op = do_propose_operation(admin, cluster, kind="reassignment", request={"plan": plan, "throttle_bytes_per_s": rate},
                              source="cli")  # fmt: skip
    do_approve_operation(admin, op, source="cli")
    samples = []
    deadline = time.monotonic() + 4 * total / rate + 60
    while time.monotonic() < deadline:
        samples.append((time.monotonic(), client.replica_sizes([topic]).get((1, topic, 0), 0)))
        if Operation.objects.get(pk=op.pk).is_final:
            break
        time.sleep(0.5)
    op.refresh_from_db()
    if not op.is_final:
        do_cancel_operation(admin, op, source="cli")
    moving = [(t, b) for t, b in samples if 0.1 * total <= b <= 0.9 * total]
    if op.state != "done" or len(moving) < 3:
        return {"result": f"not measurable: the move ended {op.state} with {len(moving)} samples in the middle 80 %"}
    (t0, b0), (t1, b1) = moving[0], moving[-1]
    measured = (b1 - b0) / (t1 - t0)
    log(f"throttle {rate} B/s: copied at {measured:.0f} B/s ({100 * (measured / rate - 1):+.1f} %)")
    return {"throttle_bytes_per_s": rate, "measured_bytes_per_s": measured, "error_pct": 100 * (measured / rate - 1),
            "target_pct": 10}  # fmt: skip


def write(results: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"operations-{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")
    sup = results["supervision"]
    lines = [
        f"# Managed-service operations ({results['time']}, {results['profile']}, {results['machine']['cpus']} CPUs)",
        "",
        "| measure | median | max | target |",
        "|---|---|---|---|",
        f"| killed broker shown in the console | {sup['shown_s']['median']:.2f} s | {sup['shown_s']['max']:.2f} s | 5 s |",
        f"| killed broker restarted by the supervisor | {sup['restarted_s']['median']:.2f} s | "
        f"{sup['restarted_s']['max']:.2f} s | 10 s |",
        f"| ... back in service (registered again) | {sup['in_service_s']['median']:.2f} s | "
        f"{sup['in_service_s']['max']:.2f} s | |",
        "",
    ]
    fo, th = results["failover"], results["throttle"]
    if "seconds" in fo:
        lines.append(f"Failover of {fo['partitions']} partitions x {fo['bytes_each'] >> 20} MB: {fo['state']} in "
                     f"{fo['seconds']:.1f} s (target 120 s), replication factor restored: {fo['replication_factor_restored']}.")  # fmt: skip
    else:
        lines.append(f"Failover: {fo['result']}.")
    if "error_pct" in th:
        lines.append(f"Throttle {th['throttle_bytes_per_s']} B/s: copied at {th['measured_bytes_per_s']:.0f} B/s "
                     f"({th['error_pct']:+.1f} %, target within 10 %).")  # fmt: skip
    else:
        lines.append(f"Throttle: {th['result']}.")
    (RESULTS / "operations-latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
