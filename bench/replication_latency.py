#!/usr/bin/env python
"""acks=all latency at RF 3 against RF 1, with one request in flight, this tree against another checkout.

    .venv/bin/python bench/replication_latency.py --baseline /tmp/odradek-old [--runs 3]

What the replication round trip costs a producer that waits for each answer (the idempotent producer of
bench/cluster_bench.py keeps one request in flight per partition, so its rate is batch size / round trip):
- latency: one confluent-kafka producer, acks=all, linger.ms=0, max.in.flight=1, one 1 KiB record at a time to
  the 6 partitions in turn, each sent once the previous one is acknowledged; median, p90 and p99 of the time
  from produce() to its acknowledgement (flush()), on an RF 3 topic (min.insync.replicas=2) and an RF 1 one.
- idempotent rate: cluster_bench's idempotent scenario (bench/run.py's producer settings, acks=all,
  enable.idempotence), RF 3 and RF 1.
A three-broker cluster per tree, both on one ZooKeeper (separate chroots, as bench/replication_cpu.py), runs
alternating between trees so that whatever else the machine does weighs on both alike.

Results: bench/results/replication-latency-<UTC timestamp>.json and bench/results/replication-latency-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster_bench
import replication_cpu
import run

from deploy.zookeeper import ZooKeeperServer

TOPICS = {"rf3": ("bench-lat-rf3", 3, "2"), "rf1": ("bench-lat-rf1", 1, "1")}


def latencies(bootstrap: str, topic: str, count: int) -> list[float]:
    """Milliseconds from produce() to the acknowledgement, one record in flight at a time."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "max.in.flight": 1})
    payload = b"x" * 1024
    for i in range(50):  # connections and metadata
        p.produce(topic, payload, partition=i % 6)
        p.flush(30)
    out = []
    for i in range(count):
        t0 = time.perf_counter()
        p.produce(topic, payload, partition=i % 6)
        if p.flush(30):
            raise RuntimeError(f"{topic}: a record not acknowledged within 30 s")
        out.append((time.perf_counter() - t0) * 1000)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", type=Path, required=True, help="checkout of the commit to compare with")
    parser.add_argument(
        "--baseline-name", help="what the baseline is (a commit), when its checkout has no git"
    )
    parser.add_argument("--runs", type=int, default=3, help="measured rounds (after a warm-up)")
    parser.add_argument("--count", type=int, default=1000, help="records per latency run")
    parser.add_argument("--records", type=int, default=50_000, help="records per idempotent-rate run")
    parser.add_argument("--cap-s", type=float, default=15.0, help="time cap per idempotent-rate run")
    parser.add_argument("--no-save", action="store_true", help="print only, write no results file")
    args = parser.parse_args()

    trees = {"baseline": args.baseline.resolve(), "head": run.REPO}
    workroot = Path(tempfile.mkdtemp(prefix="replication-latency-"))
    zookeeper = ZooKeeperServer(workroot / "zookeeper", run.free_port())
    load_before = os.getloadavg()
    clusters: dict[str, replication_cpu.TreeCluster] = {}
    samples: dict[str, dict[str, list]] = {
        label: {f"{kind}_{what}": [] for kind in TOPICS for what in ("latency_ms", "idempotent_rate")}
        for label in trees
    }
    try:
        zookeeper.start()
        for label, tree in trees.items():
            cluster = clusters[label] = replication_cpu.TreeCluster(
                tree, workroot / label, zookeeper, f"/{label}"
            )
            cluster.start()
            cluster_bench.log(f"{label}: {replication_cpu.git_describe(tree)}")
            for topic, rf, min_isr in TOPICS.values():
                cluster.create_topic(topic, 6, rf, {"min.insync.replicas": min_isr})
        for i in range(args.runs + 1):  # the first round is the warm-up
            labels = list(clusters) if i % 2 == 0 else list(reversed(clusters))
            for label in labels:
                bootstrap = clusters[label].bootstrap
                for kind, (topic, _, _) in TOPICS.items():
                    lat = latencies(bootstrap, topic, args.count if i else args.count // 4)
                    rate = cluster_bench.produce_rate(bootstrap, topic, 1024, args.records, args.cap_s, "all",
                                                      idempotent=True)  # fmt: skip
                    cluster_bench.log(f"{label} {kind} round {i}: latency median {statistics.median(lat):.2f} "
                                      f"ms p99 {percentile(lat, 0.99):.2f}, idempotent {rate / 1000:.1f}k rec/s")  # fmt: skip
                    if i:
                        samples[label][f"{kind}_latency_ms"].extend(lat)
                        samples[label][f"{kind}_idempotent_rate"].append(rate)
    finally:
        for cluster in clusters.values():
            cluster.stop()
        zookeeper.stop()
        shutil.rmtree(workroot, ignore_errors=True)

    summary = {}
    for label, s in samples.items():
        out: dict = {"commit": args.baseline_name if label == "baseline" and args.baseline_name
                     else replication_cpu.git_describe(trees[label])}  # fmt: skip
        for kind in TOPICS:
            lat = s[f"{kind}_latency_ms"]
            out[kind] = {"latency_ms": {"median": statistics.median(lat), "p90": percentile(lat, 0.9),
                                        "p99": percentile(lat, 0.99)},
                         "idempotent_rate": run.summarize(s[f"{kind}_idempotent_rate"])}  # fmt: skip
        out["idempotent_ratio"] = (
            out["rf3"]["idempotent_rate"]["median"] / out["rf1"]["idempotent_rate"]["median"]
        )
        summary[label] = out
    print(json.dumps(summary, indent=2))
    if args.no_save:
        return
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    load_after = os.getloadavg()
    facts = {"load_average_1m_before_after": [load_before[0], load_after[0]], "runs": args.runs,
             "latency_records_per_run": args.count, "idempotent_records_per_run": args.records}  # fmt: skip
    rates = {label: {n: v for n, v in s.items() if "rate" in n} for label, s in samples.items()}
    (run.RESULTS / f"replication-latency-{stamp}.json").write_text(
        json.dumps({**facts, "summary": summary, "rates": rates}, indent=2)
    )
    lines = [
        f"# Replication: acks=all latency with one request in flight, A/B ({stamp})",
        "",
        f"One confluent-kafka producer, 1 KiB records, 6 partitions; {args.runs} interleaved rounds per tree after a "
        f"warm-up of {args.count} records one at a time (acks=all, linger.ms=0, max.in.flight=1) and of the idempotent "
        f"producer ({args.records} records, bench/run.py's settings) ({os.cpu_count()} CPUs shared with other work: "
        f"1-minute load average {load_before[0]:.1f} before, {load_after[0]:.1f} after).",
        "",
        "| tree | commit | RF3 latency ms median / p90 / p99 | RF1 latency ms median / p90 / p99 "
        "| idempotent RF3 rec/s | idempotent RF1 rec/s | idempotent ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for label in trees:
        s = summary[label]
        a, b = s["rf3"], s["rf1"]
        lat = "{median:.2f} / {p90:.2f} / {p99:.2f}"
        lines.append(
            f"| {label} | {s['commit']} | {lat.format(**a['latency_ms'])} | {lat.format(**b['latency_ms'])} | "
            f"{a['idempotent_rate']['median'] / 1000:.1f}k | {b['idempotent_rate']['median'] / 1000:.1f}k | "
            f"{s['idempotent_ratio']:.2f} |"
        )
    (run.RESULTS / "replication-latency-latest.md").write_text("\n".join(lines) + "\n")
    cluster_bench.log(f"results in {run.RESULTS / 'replication-latency-latest.md'}")


if __name__ == "__main__":
    main()
