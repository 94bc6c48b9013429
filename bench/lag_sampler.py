#!/usr/bin/env python
"""Lag sampler benchmark (part of `make bench`): one sampling round over many groups, and how soon an alert
fires.

    python bench/lag_sampler.py            # 1,000 groups x 10 partitions
    python bench/lag_sampler.py --quick    # 100 groups x 10 partitions

Targets (issue: observability): a round over 1,000 groups x 10 partitions under 5 s against a local broker
(the round includes storing the samples in the console's database and writing them to the lag-samples topic);
an alert fires within one sampling interval plus the rule's duration of the condition starting.

One standalone Odradek broker on a free port (as bench/console.py starts it), 100 topics of 10 partitions;
group i commits offsets on all 10 partitions of topic i mod 100. The console's database is a temporary SQLite
file. Median and max of 5 rounds after one warm-up round. The alert latency is measured on the sampler's own
clock: rounds every `interval` seconds, the condition starting at a random moment between two rounds.
Results: bench/results/lag-sampler-<UTC time>.json and bench/results/lag-sampler-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TOPICS, PARTITIONS, ROUNDS = 100, 10, 5
INTERVAL_S, FOR_S = 30, 60


def _console_bench():
    spec = importlib.util.spec_from_file_location("console_bench", REPO / "bench" / "console.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log(msg: str) -> None:
    sys.stderr.write(f"[lag sampler bench {time.strftime('%H:%M:%S')}] {msg}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    groups = 100 if args.quick else 1000
    workdir = Path(tempfile.mkdtemp(prefix="odradek-lag-bench-"))
    os.environ.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        CONSOLE_VAR_DIR=str(workdir / "console"),
        DJANGO_DEBUG="1",
        CONSOLE_LOG_LEVEL="WARNING",
    )
    sys.path.insert(0, str(REPO))
    broker, bootstrap = _console_bench().start_broker(workdir)
    try:
        results = run(bootstrap, groups)
    finally:
        broker.terminate()
        broker.wait(60)
        shutil.rmtree(workdir, ignore_errors=True)
    results.update(
        profile="quick" if args.quick else "full",
        machine={"cpus": os.cpu_count(), "load": os.getloadavg()[0]},
        time=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    write(results)


def run(bootstrap: str, group_count: int) -> dict:
    import django

    django.setup()
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from django.core.management import call_command

    from console.clusters.client import client_for, close_all
    from console.clusters.models import Cluster
    from console.monitoring.alerting import evaluate_cluster
    from console.monitoring.models import Alert, AlertRule
    from console.monitoring.sampler import sample_cluster

    call_command("migrate", verbosity=0)
    cluster = Cluster.objects.create(name="bench", bootstrap_servers=bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"lag-bench-{i:03d}" for i in range(TOPICS)]
    log(f"creating {TOPICS} topics of {PARTITIONS} partitions")
    for future in admin.create_topics(
        [NewTopic(n, PARTITIONS, 1) for n in names], operation_timeout=60
    ).values():
        future.result(120)
    log(f"committing offsets of {group_count} groups on {PARTITIONS} partitions each")
    requests = [
        ConsumerGroupTopicPartitions(
            f"lag-bench-group-{i:04d}", [TopicPartition(names[i % TOPICS], p, 0) for p in range(PARTITIONS)]
        )
        for i in range(group_count)
    ]
    for start in range(0, group_count, 20):
        futures = [
            f for r in requests[start : start + 20] for f in admin.alter_consumer_group_offsets([r]).values()
        ]
        for future in futures:
            future.result(120)

    now_ms = int(time.time() * 1000)
    sample_cluster(cluster, now_ms)  # warm-up: creates the lag-samples topic
    seconds, samples = [], 0
    for i in range(ROUNDS):
        started = time.perf_counter()
        result = sample_cluster(cluster, now_ms + (i + 1) * INTERVAL_S * 1000)
        seconds.append(time.perf_counter() - started)
        samples = result.samples
    log(f"round: median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s, {samples} samples")

    # alert latency on the sampler's clock
    rule = AlertRule.objects.create(
        name="bench",
        cluster=cluster,
        group_pattern="lag-bench-group-0000",
        condition="offset_lag",
        threshold=0,
        for_s=FOR_S,
    )
    clock = now_ms + (ROUNDS + 1) * INTERVAL_S * 1000
    offset = random.Random(7).uniform(0, INTERVAL_S * 1000)
    producer = client_for(cluster).producer()
    producer.produce(names[0], value=b"x", partition=0)
    producer.flush(10)
    condition_ms = clock + offset  # the record is written "between two rounds"
    fired_ms = None
    rounds = 0
    while fired_ms is None and rounds < 20:
        clock += INTERVAL_S * 1000
        rounds += 1
        sample_cluster(cluster, clock, publish=False)
        evaluate_cluster(cluster, clock)
        alert = Alert.objects.filter(rule=rule, state="firing").first()
        fired_ms = alert.fired_ms if alert else None
    latency_s = (fired_ms - condition_ms) / 1000 if fired_ms else None
    log(f"alert fired {latency_s:.1f} s after the condition began (bound {INTERVAL_S + FOR_S} s)")
    close_all()
    return {
        "groups": group_count,
        "partitions_per_group": PARTITIONS,
        "samples_per_round": samples,
        "round_s": {"median": round(statistics.median(seconds), 2), "max": round(max(seconds), 2)},
        "alert": {"interval_s": INTERVAL_S, "for_s": FOR_S, "fired_after_s": latency_s},
    }


def write(results: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"lag-sampler-{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")
    alert = results["alert"]
    lines = [
        f"# Lag sampler benchmark ({results['profile']}, {results['time']})",
        "",
        f"{results['groups']:,} groups x {results['partitions_per_group']} partitions "
        f"({results['samples_per_round']:,} samples a round), one standalone broker, "
        f"{results['machine']['cpus']} CPUs, load {results['machine']['load']:.1f}.",
        "",
        "| measure | result | target |",
        "|---|---:|---:|",
        f"| sampling round, median | {results['round_s']['median']} s | < 5 s |",
        f"| sampling round, max | {results['round_s']['max']} s | < 5 s |",
        f"| alert fired after the condition began | {alert['fired_after_s']:.1f} s | "
        f"<= {alert['interval_s'] + alert['for_s']} s (interval + for) |",
    ]
    (RESULTS / "lag-sampler-latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
