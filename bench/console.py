#!/usr/bin/env python
"""Console benchmarks (part of `make bench`): server time of the list pages at scale, and the message browser
on a large partition.

    python bench/console.py            # 5,000 topics, 1,000 groups, a 1 GiB partition
    python bench/console.py --quick    # 500 topics, 100 groups, 64 MiB: checks the script in a minute

Targets (issue: the console): the first page of the topic list with 5,000 topics and of the group list with
1,000 groups under 300 ms of server time; the first 100 records of a 1 GiB partition under 1 s.

Server time is the time Django takes to answer the request in-process (test client, logged in as an admin),
including its requests to the broker, measured "cold" (the console's 2 s metadata cache emptied before each
request) and "warm". One standalone Odradek broker on a free port with its log in a temporary directory; the
console's database is a temporary SQLite file. Median and max of 7 requests after one warm-up.
Results: bench/results/console-<UTC time>.json and bench/results/console-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
REPEATS = 7


def log(msg: str) -> None:
    sys.stderr.write(f"[console bench {time.strftime('%H:%M:%S')}] {msg}\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(workdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "broker_runtime", "--config", str(REPO / "deploy" / "standalone.properties")]
    for key, value in {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(workdir / "logs"),
    }.items():
        cmd += ["--override", f"{key}={value}"]
    log_file = open(workdir / "broker.log", "wb")  # noqa: SIM115  (the broker writes to it until it stops)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the broker did not start; see " + str(workdir / "broker.log"))


def timed(fn, *, cold) -> dict:
    fn()  # warm-up
    samples = []
    for _ in range(REPEATS):
        if cold:
            cold()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(samples), 1), "max_ms": round(max(samples), 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    topics, groups, partition_bytes = (500, 100, 64 << 20) if args.quick else (5000, 1000, 1 << 30)
    workdir = Path(tempfile.mkdtemp(prefix="odradek-console-bench-"))
    os.environ.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        CONSOLE_VAR_DIR=str(workdir / "console"),
        DJANGO_DEBUG="1",
        CONSOLE_LOG_LEVEL="WARNING",
    )
    sys.path.insert(0, str(REPO))
    broker, bootstrap = start_broker(workdir)
    try:
        results = run(bootstrap, topics, groups, partition_bytes)
    finally:
        broker.terminate()
        broker.wait(60)
        shutil.rmtree(workdir, ignore_errors=True)
    results.update(
        profile="quick" if args.quick else "full",
        machine={"cpus": os.cpu_count()},
        time=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    write(results)


def run(bootstrap: str, topic_count: int, group_count: int, partition_bytes: int) -> dict:
    import django

    django.setup()
    from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment

    from console.clusters.client import client_for
    from console.clusters.models import Cluster
    from console.groups.tasks import refresh_all_lag
    from console.topics import messages

    setup_test_environment()
    call_command("migrate", verbosity=0)
    cluster = Cluster.objects.create(name="bench", bootstrap_servers=bootstrap)
    admin_user = get_user_model().objects.create_superuser("bench", "", "bench-password")
    client = Client()
    client.force_login(admin_user)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    log(f"creating {topic_count} topics")
    names = [f"bench-topic-{i:05d}" for i in range(topic_count)]
    for start in range(0, topic_count, 250):
        futures = admin.create_topics(
            [NewTopic(n, 1, 1) for n in names[start : start + 250]], operation_timeout=60
        )
        for future in futures.values():
            future.result(120)
    log(f"committing offsets for {group_count} groups")
    requests = [
        ConsumerGroupTopicPartitions(f"bench-group-{i:04d}", [TopicPartition(names[i % topic_count], 0, 0)])
        for i in range(group_count)
    ]
    for start in range(0, group_count, 20):  # one group per request (librdkafka), 20 in flight
        futures = [
            f for r in requests[start : start + 20] for f in admin.alter_consumer_group_offsets([r]).values()
        ]
        for future in futures:
            future.result(120)
        if start == 0:
            log("  (the first commits created __consumer_offsets)")
    refresh_all_lag()

    def cold() -> None:
        client_for(cluster).invalidate()

    def page(url: str):
        def get() -> None:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return get

    base = f"/clusters/{cluster.pk}"
    results: dict = {"topics": topic_count, "groups": group_count, "pages": {}}
    for label, url in [
        ("topic list, first page", f"{base}/topics/"),
        ("topic list, search", f"{base}/topics/?q=topic-0499"),
        ("group list, first page", f"{base}/groups/"),
        ("group list, sorted by lag", f"{base}/groups/?sort=-lag"),
        ("API topics, first page", f"/api/v1/clusters/{cluster.pk}/topics/"),
        ("API groups, first page", f"/api/v1/clusters/{cluster.pk}/groups/"),
    ]:
        results["pages"][label] = {"cold": timed(page(url), cold=cold), "warm": timed(page(url), cold=None)}
        log(f"{label}: {results['pages'][label]}")

    log(f"filling one partition with {partition_bytes >> 20} MiB")
    admin.create_topics([NewTopic("bench-big", 1, 1)])["bench-big"].result(60)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
            "compression.type": "none",
        }
    )
    value = os.urandom(1024)
    started = time.monotonic()
    for i in range(partition_bytes // 1024):
        while True:
            try:
                producer.produce("bench-big", value=value, key=str(i).encode(), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(300)
    results["fill_mb_s"] = round(partition_bytes / (1 << 20) / (time.monotonic() - started), 1)
    end = client_for(cluster).offsets([("bench-big", 0)], "latest")[("bench-big", 0)]
    results["browser"] = {"records": end}
    for label, kwargs in [
        ("first 100 from the start", {"mode": "oldest"}),
        ("100 from the middle", {"mode": "offset", "offset": end // 2}),
        ("newest 100", {"mode": "newest"}),
    ]:

        def browse(kwargs=kwargs) -> None:
            result = messages.browse(cluster, "bench-big", partition=0, limit=100, **kwargs)
            assert len(result.messages) == 100, len(result.messages)

        results["browser"][label] = timed(browse, cold=None)
        log(f"browser {label}: {results['browser'][label]}")
    results["browser"]["page, newest 100"] = timed(
        page(f"{base}/topics/bench-big/messages/?mode=newest&limit=100"), cold=None
    )
    from console.clusters.client import close_all

    close_all()
    return results


def write(results: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"console-{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# Console benchmark ({results['profile']}, {results['time']})",
        "",
        f"{results['topics']:,} topics, {results['groups']:,} groups; one standalone broker; server time in-process "
        f"(median / max of {REPEATS}); target: first pages under 300 ms, first 100 records under 1 s.",
        "",
        "| page | cold median | cold max | warm median |",
        "|---|---:|---:|---:|",
    ]
    for label, r in results["pages"].items():
        lines.append(
            f"| {label} | {r['cold']['median_ms']} ms | {r['cold']['max_ms']} ms | {r['warm']['median_ms']} ms |"
        )
    lines += [
        "",
        f"Message browser on one partition of {results['browser']['records']:,} records of 1 KiB "
        f"(filled at {results['fill_mb_s']} MB/s):",
        "",
        "| read | median | max |",
        "|---|---:|---:|",
    ]
    for label, r in results["browser"].items():
        if isinstance(r, dict):
            lines.append(f"| {label} | {r['median_ms']} ms | {r['max_ms']} ms |")
    (RESULTS / "console-latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
