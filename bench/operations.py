#!/usr/bin/env python
"""Managed-service benchmarks (part of `make bench`): supervision, failover and the reassignment throttle.

    python bench/operations.py            # 100 partitions x 10 MB for the failover, 5 kills
    python bench/operations.py --quick    # 10 partitions x 1 MB, 2 kills: checks the script

Targets (issue: managed-service operations):
- a killed broker shows in the console within 5 s (the Brokers page's fragment, as its 2 s poll asks for it,
  no longer says "running"), and the supervisor has restarted it within 10 s (a new process; "in service" is
  also reported: answering and registered again, which waits for the killed broker's ZooKeeper session);
- failover back to the full replication factor for 100 partitions of 10 MB each within 2 minutes: from the kill
  (broker 2 of three, RF 2: about 67 partitions lose a replica) until every partition has two replicas, none
  on the dead broker, both in the ISR; the grace period (5 s), the ZooKeeper session and beat's 5 s watch
  included;
- the reassignment throttle holds the copy rate within 10 % of its setting: a 1-partition move of 128 MB under
  a 1 MB/s throttle, the new replica's bytes sampled every 0.5 s through DescribeLogDirs; the rate held is the
  slope after Kafka's initial burst (its quota counts at least ten 1 s windows, so a move starts with about ten
  seconds' worth), fitted over the whole rest of the copy.

Everything real: ZooKeeper (Debian's package), redis-server, the supervisor (`manage.py supervise`) running three
brokers, a Celery worker and beat; the console's database is a temporary SQLite file. The failover and throttle need
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
import threading
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
        proc = subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
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
    from tests.console.managed import free_port_range

    base = free_port_range(3)  # below the ephemeral ports, so that a killed broker's port stays free for it
    cluster = do_provision_cluster(admin, name="bench", brokers=3, base_port=base, source="cli")
    python = sys.executable
    processes.start("supervisor", [python, "manage.py", "supervise"])
    processes.start("worker", [python, "-m", "celery", "-A", "console", "worker", "--pool", "threads",
                               "--concurrency", "2", "--without-gossip", "--without-mingle"])  # fmt: skip
    processes.start("beat", [python, "-m", "celery", "-A", "console", "beat"])
    states = lambda: {b.broker_id: b.state for b in ManagedBroker.objects.filter(cluster=cluster)}  # noqa: E731
    wait(lambda: set(states().values()) == {"running"}, 120, "three brokers running")
    web = Client()
    web.force_login(admin)
    results = {"supervision": supervision(cluster, web, kills=2 if quick else 5)}
    partitions, size = (10, 1 << 20) if quick else (100, 10 << 20)
    results["failover"] = failover(cluster, partitions, size, grace_s=5)
    results["throttle"] = (
        throttle(cluster, admin, total=24 << 20, rate=1 << 20)
        if quick
        else throttle(cluster, admin, total=128 << 20, rate=1 << 20)
    )
    from console.clusters.client import close_all

    close_all()
    return results


def supervision(cluster, web, *, kills: int) -> dict:
    """SIGKILL a broker `kills` times, rotating over brokers 1, 2, 0 (so each crash is a broker's first or second
    within the supervisor's 60 s: restarted after 0.5 s or 1 s; crashes in a row back off up to 30 s on purpose);
    time what the Brokers page shows and what the supervisor does."""
    import re

    from console.clusters.models import ManagedBroker

    def shown(broker_id: int) -> str:
        html = web.get(f"/clusters/{cluster.pk}/brokers/", HTTP_HX_REQUEST="true").content.decode()
        row = re.search(rf'<tr data-broker="{broker_id}">.*?class="process-state">(.*?)</td>', html, re.S)
        return re.sub(r"<[^>]+>", "", row.group(1)).strip() if row else ""

    visible, restarted, in_service = [], [], []
    for i in range(kills):
        broker_id = (1, 2, 0)[i % 3]
        broker = ManagedBroker.objects.get(cluster=cluster, broker_id=broker_id)
        assert shown(broker_id) == "running"
        killed = time.monotonic()
        os.kill(broker.pid, signal.SIGKILL)
        # the page (as its poll asks for it) and the supervisor's record, watched side by side: a page request
        # while a broker has just died may take a few seconds, which must not delay seeing the restart
        seen: list[float] = []

        def watch(b: int = broker_id, seen: list[float] = seen, killed: float = killed) -> None:
            wait(lambda: shown(b) != "running", 30, "the kill shown")
            seen.append(time.monotonic() - killed)

        watcher = threading.Thread(target=watch)
        watcher.start()
        old = broker.pid
        wait(
            lambda b=broker, old=old: (p := ManagedBroker.objects.get(pk=b.pk).pid) and p != old,
            60,
            "a new process",
            interval=0.05,
        )
        restarted.append(time.monotonic() - killed)
        watcher.join()
        if not seen:
            raise TimeoutError(f"broker {broker_id}'s kill never shown on the page")
        visible.append(seen[0])
        wait(lambda b=broker_id: shown(b) == "running", 120, "back in service")
        in_service.append(time.monotonic() - killed)
        log(
            f"kill {i + 1} (broker {broker_id}): shown {visible[-1]:.2f} s, restarted {restarted[-1]:.2f} s, "
            f"in service {in_service[-1]:.2f} s"
        )
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


def _create_topic(cluster, topic: str, assignment: dict[int, list[int]]) -> None:
    """Create a topic with a given assignment, retrying while the admin client still looks for a dead controller."""
    from kafka.admin import NewTopic

    from console.clusters.client import client_for, forget

    def created() -> bool:
        client = client_for(cluster)
        try:
            if topic not in client.metadata(max_age_s=0).topics:
                client._kafka_python_admin().create_topics(
                    [NewTopic(topic, -1, -1, replica_assignments=assignment)]
                )
        except Exception as exc:
            log(f"creating {topic}: {exc}; retrying")
            forget(cluster)
            return False
        md = client.metadata(max_age_s=0).topics.get(topic)
        return bool(md and all(p.leader >= 0 for p in md.partitions))

    wait(created, 120, f"topic {topic} created with leaders", interval=1)


def _full_isr(client, topic: str, rf: int, dead: int) -> bool:
    """Every partition has `rf` replicas, none on the dead broker, all in the ISR."""
    md = client.metadata(max_age_s=0).topic(topic)
    return all(len(p.replicas) == rf and dead not in p.replicas and sorted(p.isr) == sorted(p.replicas)
               for p in md.partitions)  # fmt: skip


def failover(cluster, partitions: int, size: int, grace_s: int) -> dict:
    """Kill broker 2 for good (its spec says stopped, so the supervisor leaves it dead); beat's failover watch
    (a real `celery beat`, every 5 s) sees it missing once its ZooKeeper session is gone, waits the grace period
    and starts a failover on the worker. Timed from the kill: until every partition is back at its replication
    factor with every replica in the ISR (the target), and the failover's own steps on the way."""
    from console.clusters.client import client_for
    from console.clusters.models import Cluster, ManagedBroker
    from console.operations.models import Operation

    client = client_for(cluster)
    topic = "failover-bench"
    assignment = {p: [p % 3, (p + 1) % 3] for p in range(partitions)}
    _create_topic(cluster, topic, assignment)
    log(f"producing {partitions} x {size >> 20} MB")
    started = time.monotonic()
    _produce(cluster.bootstrap_servers, topic, partitions, size)
    produced_s = time.monotonic() - started

    def caught_up() -> bool:  # every follower holds as many bytes as its leader (the ISR alone says little)
        sizes = client.replica_sizes([topic])
        return all(
            sizes.get((r[1], topic, p), 0) >= sizes.get((r[0], topic, p), 1) for p, r in assignment.items()
        )

    try:
        wait(caught_up, 60 + partitions * size / (5 << 20), "followers caught up", interval=1)
    except TimeoutError:
        return {"result": "not measurable: the followers never caught up with their leaders (no replication)"}
    log(f"produced and replicated in {time.monotonic() - started:.1f} s (produce {produced_s:.1f} s)")
    sizes = client.replica_sizes([topic])
    on_broker_2 = sum(sizes.get((2, topic, p), 0) for p in assignment)
    to_copy = sum(1 for r in assignment.values() if 2 in r)
    Cluster.objects.filter(pk=cluster.pk).update(failover_grace_s=grace_s)
    victim = ManagedBroker.objects.get(cluster=cluster, broker_id=2)
    ManagedBroker.objects.filter(pk=victim.pk).update(should_run=False)
    killed = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    marks: dict[str, float] = {}
    deadline = killed + 600
    while time.monotonic() < deadline:
        now = time.monotonic() - killed
        op = Operation.objects.filter(cluster=cluster, kind="failover").first()
        if op is not None:
            marks.setdefault("failover started", now)
            steps = {s["step"] for s in op.steps}
            if "submitted" in steps:
                marks.setdefault("reassignment submitted", now)
            if op.is_final:
                marks.setdefault(f"failover {op.state}", now)
        if "reassignment submitted" in marks and "full replication" not in marks:
            try:
                if _full_isr(client, topic, 2, dead=2):
                    marks["full replication"] = now
            except Exception as exc:
                log(f"metadata: {exc}")
        if op is not None and op.is_final and ("full replication" in marks or op.state != "done"):
            break
        if "full replication" in marks and now > marks["full replication"] + 60:
            break  # replication is back; the operation's own end is reported as it is
        time.sleep(0.5)
    else:
        return {"result": f"the failover did not finish within 10 minutes ({marks})"}
    op.refresh_from_db()
    # the new replicas hold what their leaders hold (byte counts from DescribeLogDirs), not just an ISR entry
    md = client.metadata(max_age_s=0).topic(topic)

    def live_sizes():  # DescribeLogDirs of every broker the admin client knows: a new one forgets the dead broker
        from console.clusters.client import forget

        try:
            return client_for(cluster).replica_sizes([topic])
        except Exception as exc:
            log(f"log dirs: {exc}")
            forget(cluster)
            return None

    sizes = wait(live_sizes, 60, "replica sizes", interval=1)
    copies_complete = all(
        sizes.get((r, topic, p.partition), -1) == sizes.get((p.leader, topic, p.partition))
        for p in md.partitions
        for r in p.replicas
    )
    seconds = marks.get("full replication")
    copy_s = seconds - marks["reassignment submitted"] if seconds else None
    log(f"failover of {partitions} x {size >> 20} MB: {op.state}; {marks}")
    return {
        "partitions": partitions,
        "bytes_each": size,
        "partitions_copied": to_copy,
        "copies_complete": copies_complete,
        "bytes_copied": on_broker_2,  # what the dead broker held: the new replicas copy as much again
        "grace_s": grace_s,
        "state": op.state,
        "error": op.error,
        "marks_s": marks,
        "seconds": seconds,
        "copy_seconds": copy_s,
        "copy_mb_per_s": on_broker_2 / copy_s / 1e6 if copy_s else None,
        "target_s": 120,
    }


def throttle(cluster, admin, *, total: int, rate: int) -> dict:
    """A one-partition move of `total` bytes under a `rate` throttle (set on the leader and the follower, as
    kafka-reassign-partitions does); the bytes the new replica holds, sampled every 0.5 s through DescribeLogDirs.

    Kafka's quota is a rate over `replication.quota.window.num` (11) windows of 1 s that counts at least 10 s:
    a throttled move first copies about ten seconds' worth at once (the burst), and each window's bytes leave the
    rate whole 11 s later. The rate the throttle holds is the one after the burst, up to the end of the copy."""
    from console.clusters.client import client_for, forget
    from console.operations.actions import do_approve_operation, do_cancel_operation, do_propose_operation
    from console.operations.models import Operation

    forget(cluster)
    client = client_for(cluster)
    topic = "throttle-bench"
    _create_topic(cluster, topic, {0: [0]})
    _produce(cluster.bootstrap_servers, topic, 1, total)
    size = client.replica_sizes([topic])[(0, topic, 0)]
    plan = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [0, 1]}]}
    op = do_propose_operation(admin, cluster, kind="reassignment", request={"plan": plan, "throttle_bytes_per_s": rate},
                              source="cli")  # fmt: skip
    do_approve_operation(admin, op, source="cli")
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + 2 * size / rate + 60
    while time.monotonic() < deadline:
        try:
            samples.append((time.monotonic(), client.replica_sizes([topic]).get((1, topic, 0), 0)))
        except Exception as exc:
            log(f"log dirs: {exc}")
        if (samples and samples[-1][1] >= size) or Operation.objects.get(pk=op.pk).is_final:
            break
        time.sleep(0.5)
    wait(lambda: Operation.objects.get(pk=op.pk).is_final, 60, "the move ended")
    op.refresh_from_db()
    if not op.is_final:
        do_cancel_operation(admin, op, source="cli")
    started = next((t for t, b in samples if b > 0), None)
    if op.state != "done" or started is None or samples[-1][1] < size:
        return {"result": f"not measurable: the move ended {op.state}"}
    burst_end, burst = max((t, b) for t, b in samples if t <= started + 1.0)
    done = samples[-1][0]
    # a line fitted through every sample from the burst's end to the copy's end: the saw-tooth of whole windows
    # leaving the rate averages out over the cycles of a long move
    held = [(t, b) for t, b in samples if t >= burst_end]
    sustained = statistics.linear_regression([t for t, _ in held], [b for _, b in held]).slope
    steps = []  # the bytes copied in each 2 s, to show the shape of the copy
    i = 0
    for j in range(len(samples)):
        if samples[j][0] - samples[i][0] >= 2:
            steps.append(samples[j][1] - samples[i][1])
            i = j
    log(
        f"throttle {rate} B/s: after the burst copied at {sustained:.0f} B/s ({100 * (sustained / rate - 1):+.1f} %)"
    )
    return {
        "bytes": size,
        "throttle_bytes_per_s": rate,
        "burst_bytes": burst,
        "measured_bytes_per_s": sustained,
        "error_pct": 100 * (sustained / rate - 1),
        "copy_seconds": done - started,
        "average_bytes_per_s": size / (done - started),
        "largest_two_second_step_bytes": max(steps, default=0),
        "samples": [(round(t - started, 2), b) for t, b in samples],
        "target_pct": 10,
    }


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
        f"| killed broker restarted by the supervisor (a broker's first or second crash in 60 s) | "
        f"{sup['restarted_s']['median']:.2f} s | "
        f"{sup['restarted_s']['max']:.2f} s | 10 s |",
        f"| ... back in service (registered again) | {sup['in_service_s']['median']:.2f} s | "
        f"{sup['in_service_s']['max']:.2f} s | |",
        "",
    ]
    fo, th = results["failover"], results["throttle"]
    if fo.get("seconds") and fo.get("copy_seconds"):
        marks = ", ".join(f"{k} {v:.1f} s" for k, v in fo["marks_s"].items())
        lines.append(
            f"Failover of {fo['partitions']} partitions x {fo['bytes_each'] >> 20} MB (RF 2, {fo['partitions_copied']} "
            f"partitions had a replica on the killed broker; grace period {fo['grace_s']} s): every partition back at "
            f"its replication factor with its whole ISR {fo['seconds']:.1f} s after the kill (target 120 s; every "
            f"replica as large as its leader: {fo['copies_complete']}); the copy "
            f"itself {fo['copy_seconds']:.1f} s ({fo['bytes_copied'] / 1e6:.0f} MB, {fo['copy_mb_per_s']:.1f} MB/s). From the "
            f"kill: {marks}."
        )
    elif fo.get("seconds"):
        lines.append(f"Failover: full replication {fo['seconds']:.1f} s after the kill; {fo['marks_s']}.")
    elif "result" in fo:
        lines.append(f"Failover: {fo['result']}.")
    else:
        lines.append(f"Failover: ended {fo['state']} ({fo['error']}); {fo['marks_s']}.")
    if "error_pct" in th:
        lines.append(
            f"Throttle {th['throttle_bytes_per_s']} B/s on a {th['bytes'] / 1e6:.0f} MB move: after Kafka's initial "
            f"burst ({th['burst_bytes'] / 1e6:.1f} MB, about ten seconds' worth) the copy ran at "
            f"{th['measured_bytes_per_s']:.0f} B/s ({th['error_pct']:+.1f} %, target within 10 %); the whole move took "
            f"{th['copy_seconds']:.1f} s, {th['average_bytes_per_s']:.0f} B/s on average; the largest step in 2 s was "
            f"{th['largest_two_second_step_bytes'] / 1e6:.1f} MB (a window's bytes leave Kafka's rate whole)."
        )
    else:
        lines.append(f"Throttle: {th['result']}.")
    (RESULTS / "operations-latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
