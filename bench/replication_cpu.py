#!/usr/bin/env python
"""Broker CPU per million records at RF 3 acks=all against RF 1 acks=1, this tree against another checkout.

    .venv/bin/python bench/replication_cpu.py --baseline /tmp/odradek-old [--runs 3]
    .venv/bin/python bench/replication_cpu.py --baseline /tmp/odradek-old --py-spy var/bench/spy --no-save

The scenario is bench/cluster_bench.py's replication ratio (one confluent-kafka producer, 1 KiB records,
6 partitions, bench/run.py's producer settings, only acks differs): a three-broker cluster per tree, both on one
ZooKeeper (separate chroots), runs alternating between trees and between RF 3 and RF 1 so that whatever else the
machine does weighs on all alike. The number compared is the CPU seconds (utime + stime from /proc, all threads)
of the three broker processes together per million acknowledged records: a busy shared machine disturbs it far
less than wall-clock rates, which are shown beside it. `--py-spy DIR` samples every broker during the measured
runs (DIR/<tree>-broker-<id>.txt, raw collapsed stacks).

Results: bench/results/replication-cpu-<UTC timestamp>.json and bench/results/replication-cpu-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster_bench
import run

from deploy.zookeeper import ZooKeeperServer

REPO = run.REPO
KINDS = {"rf3_acks_all": ("bench-cpu-rf3", "all"), "rf1_acks_1": ("bench-cpu-rf1", "1")}


class TreeBroker(cluster_bench.ClusterBroker):
    """cluster_bench's broker, started from the sources of `tree`."""

    def __init__(self, tree: Path, broker_id: int, workdir: Path, connect: str) -> None:
        super().__init__(broker_id, workdir, connect)
        self.tree = tree

    def start(self) -> None:
        saved_repo, saved_env = cluster_bench.REPO, os.environ.get("PYTHONPATH")
        cluster_bench.REPO, os.environ["PYTHONPATH"] = self.tree, str(self.tree)
        try:
            super().start()
        finally:
            cluster_bench.REPO = saved_repo
            if saved_env is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved_env


class TreeCluster(cluster_bench.Cluster):
    def __init__(self, tree: Path, workdir: Path, zookeeper: ZooKeeperServer, chroot: str) -> None:
        self.zookeeper, self.chroot = zookeeper, chroot
        connect = zookeeper.connect_string(chroot)
        self.brokers = {i: TreeBroker(tree, i, workdir, connect) for i in range(3)}
        self._zk = None

    def start(self) -> TreeCluster:
        from kazoo.client import KazooClient

        for b in self.brokers.values():
            b.start()
        self._zk = KazooClient(hosts=self.zookeeper.connect_string(self.chroot))
        self._zk.start(30)
        cluster_bench.wait(lambda: len(self._zk.get_children("/brokers/ids")) == 3, 60, "three brokers")
        return self

    def stop(self) -> None:
        if self._zk is not None:
            self._zk.stop()
        for b in self.brokers.values():
            if b.alive:
                b.signal(signal.SIGTERM)

    def cpu(self) -> float:
        return sum(run.proc_cpu_seconds(b.proc.pid) for b in self.brokers.values())


def produce_run(cluster: TreeCluster, topic: str, acks: str, records: int, cap_s: float) -> dict:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, **run.PRODUCER_CONFIG, "acks": acks,
                  "delivery.report.only.error": True})  # fmt: skip
    failed = [0]

    def on_error(err, _msg) -> None:
        failed[0] += err is not None

    p.produce(topic, b"warm", on_delivery=on_error)
    p.flush(30)
    failed[0] = 0
    payload, sent = b"x" * 1024, 0
    cpu0, own0, t0 = cluster.cpu(), run.proc_cpu_seconds(os.getpid()), time.perf_counter()
    while sent < records and time.perf_counter() - t0 < cap_s:
        try:
            p.produce(topic, payload, on_delivery=on_error)
            sent += 1
        except BufferError:
            p.poll(0.001)
        if sent & 0xFFF == 0:
            p.poll(0)
    remaining = p.flush(120)
    elapsed = time.perf_counter() - t0
    cpu, own = cluster.cpu() - cpu0, run.proc_cpu_seconds(os.getpid()) - own0
    delivered = sent - remaining - failed[0]
    return {"records": delivered, "seconds": elapsed, "records_per_s": delivered / elapsed, "brokers_cpu_s": cpu,
            "cpu_s_per_million": cpu / delivered * 1e6, "brokers_cores": cpu / elapsed,
            "producer_cpu_s_per_million": own / delivered * 1e6}  # fmt: skip


def git_describe(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                         check=False).stdout.strip()  # fmt: skip
    return out[:100] or str(tree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="checkout of the commit to compare with")
    parser.add_argument("--baseline-name", help="what the baseline is (a commit), when its checkout has no git")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per tree and kind (after a warm-up)")
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument("--cap-s", type=float, default=10.0, help="time cap per run")
    parser.add_argument("--py-spy", type=Path, help="sample every broker with py-spy during the measured runs")
    parser.add_argument("--no-save", action="store_true", help="print only, write no results file")
    args = parser.parse_args()

    trees = {"baseline": args.baseline.resolve(), "head": REPO}
    workroot = Path(tempfile.mkdtemp(prefix="replication-cpu-"))
    zookeeper = ZooKeeperServer(workroot / "zookeeper", run.free_port())
    load_before = os.getloadavg()
    clusters: dict[str, TreeCluster] = {}
    samples: dict[str, dict[str, list[dict]]] = {label: {kind: [] for kind in KINDS} for label in trees}
    spies = []
    try:
        zookeeper.start()
        for label, tree in trees.items():
            clusters[label] = TreeCluster(tree, workroot / label, zookeeper, f"/{label}").start()
            cluster_bench.log(f"{label}: {git_describe(tree)}")
            clusters[label].create_topic("bench-cpu-rf3", 6, 3, {"min.insync.replicas": "2"})
            clusters[label].create_topic("bench-cpu-rf1", 6, 1, {"min.insync.replicas": "1"})
            for topic, acks in KINDS.values():
                produce_run(clusters[label], topic, acks, args.records // 4, args.cap_s)  # warm-up
        if args.py_spy:
            args.py_spy.mkdir(parents=True, exist_ok=True)
            spy = Path(sys.executable).parent / "py-spy"
            for label, cluster in clusters.items():
                for bid, b in cluster.brokers.items():
                    out = args.py_spy.resolve() / f"{label}-broker-{bid}.txt"
                    spies.append(subprocess.Popen(
                        [str(spy), "record", "--nonblocking", "-r", "499", "-f", "raw", "-o", str(out), "-p",
                         str(b.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        for i in range(args.runs):
            labels = list(clusters) if i % 2 == 0 else list(reversed(clusters))
            kinds = list(KINDS) if i % 2 == 0 else list(reversed(KINDS))
            for label in labels:
                for kind in kinds:
                    topic, acks = KINDS[kind]
                    r = produce_run(clusters[label], topic, acks, args.records, args.cap_s)
                    samples[label][kind].append(r)
                    cluster_bench.log(f"{label} {kind} run {i + 1}: {r['cpu_s_per_million']:.2f} CPU-s/M, "
                                      f"{r['records_per_s'] / 1000:.0f}k rec/s, brokers {r['brokers_cores']:.2f} "
                                      f"cores, producer {r['producer_cpu_s_per_million']:.2f} CPU-s/M")  # fmt: skip
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        for cluster in clusters.values():
            cluster.stop()
        zookeeper.stop()
        shutil.rmtree(workroot, ignore_errors=True)

    summary = {}
    for label, kinds in samples.items():
        s = {kind: {key: run.summarize([r[key] for r in rs])
                    for key in ("cpu_s_per_million", "records_per_s", "brokers_cores", "producer_cpu_s_per_million")}
             for kind, rs in kinds.items()}  # fmt: skip
        s["commit"] = args.baseline_name if label == "baseline" and args.baseline_name else git_describe(trees[label])
        s["cpu_ratio_rf3_over_rf1"] = s["rf3_acks_all"]["cpu_s_per_million"]["median"] / s["rf1_acks_1"][
            "cpu_s_per_million"]["median"]
        s["rate_ratio_rf3_over_rf1"] = s["rf3_acks_all"]["records_per_s"]["median"] / s["rf1_acks_1"][
            "records_per_s"]["median"]
        summary[label] = s
    # Round by round (head and baseline measured back to back), the change of head's RF3 CPU per million: the
    # machine's load drifts between rounds far more than within one.
    paired = [h["cpu_s_per_million"] / b["cpu_s_per_million"] - 1
              for h, b in zip(samples["head"]["rf3_acks_all"], samples["baseline"]["rf3_acks_all"], strict=True)]
    summary["head_rf3_cpu_change_paired"] = run.summarize(paired)
    print(json.dumps(summary, indent=2))
    if args.no_save:
        return
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    load_after = os.getloadavg()
    facts = {"load_average_1m_before_after": [load_before[0], load_after[0]], "runs": args.runs,
             "records_per_run": args.records}  # fmt: skip
    (run.RESULTS / f"replication-cpu-{stamp}.json").write_text(
        json.dumps({**facts, "summary": summary, "samples": samples}, indent=2)
    )
    lines = [
        f"# Replication: CPU of the three brokers per million records, A/B ({stamp})",
        "",
        f"One confluent-kafka producer, 1 KiB records, 6 partitions; {args.runs} interleaved runs of up to "
        f"{args.records} records per tree and kind after a warm-up ({os.cpu_count()} CPUs shared with other work: "
        f"1-minute load average {load_before[0]:.1f} before, {load_after[0]:.1f} after).",
        "",
        "| tree | commit | RF3 acks=all CPU-s/M | RF1 acks=1 CPU-s/M | CPU ratio | RF3 rec/s | RF1 rec/s "
        "| rate ratio | brokers' cores RF3 / RF1 | producer CPU-s/M RF3 / RF1 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label in trees:
        s = summary[label]
        a, b = s["rf3_acks_all"], s["rf1_acks_1"]
        lines.append(
            f"| {label} | {s['commit']} | {a['cpu_s_per_million']['median']:.1f} "
            f"({a['cpu_s_per_million']['min']:.1f}-{a['cpu_s_per_million']['max']:.1f}) | "
            f"{b['cpu_s_per_million']['median']:.1f} | {s['cpu_ratio_rf3_over_rf1']:.2f} | "
            f"{a['records_per_s']['median'] / 1000:.0f}k | {b['records_per_s']['median'] / 1000:.0f}k | "
            f"{s['rate_ratio_rf3_over_rf1']:.2f} | {a['brokers_cores']['median']:.2f} / {b['brokers_cores']['median']:.2f} "
            f"| {a['producer_cpu_s_per_million']['median']:.1f} / {b['producer_cpu_s_per_million']['median']:.1f} |"
        )
    change = summary["head_rf3_cpu_change_paired"]
    lines += ["", f"Head's RF3 CPU per million against the baseline's of the same round: median {change['median']:+.1%} "
              f"(rounds {change['min']:+.1%} to {change['max']:+.1%})."]
    (run.RESULTS / "replication-cpu-latest.md").write_text("\n".join(lines) + "\n")
    cluster_bench.log(f"results in {run.RESULTS / 'replication-cpu-latest.md'}")


if __name__ == "__main__":
    main()
