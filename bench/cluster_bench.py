#!/usr/bin/env python
"""Cluster benchmarks (part of `make bench`): replication's cost, failover's write outage, several producers.

    python bench/cluster_bench.py            # 3 measured runs per scenario
    python bench/cluster_bench.py --quick    # one short run each: checks the script

One ZooKeeper (Debian's package) and three brokers with deploy/cluster.properties (its
zookeeper.session.timeout.ms), unpinned; confluent-kafka as the load, the client configs of bench/run.py.
- replication-ratio: 1 KiB records to 6 partitions, RF 3 with acks=all (min.insync.replicas=2) against RF 1 with
  acks=1 on the same cluster, same client and client settings (only acks differs), alternating runs; target ratio
  >= 0.5. Beside it the idempotent producer, RF 3 against RF 1, both acks=all (idempotence requires it): librdkafka
  counts its in-flight window of 5 requests per partition in messages, so an idempotent producer whose batches
  hold 5 or more records keeps one request in flight per partition, and its rate is batch size / round trip.
- outage-kill9 / outage-controlled: a producer writes one partition (RF 3, acks=all) every 2 ms; once it has been
  acknowledged steadily for a second, the partition's leader is killed with SIGKILL (target: the longest gap
  between acknowledgements, from the last one before the kill, <= 5 s) or stopped with SIGTERM (controlled
  shutdown: well under 1 s), then restarted and the cluster healed before the next run.
- latency-1KiB-10k: end-to-end latency at a fixed 10,000 records/s of 1 KiB, RF 3, acks=all, with and without
  idempotence (performance.md's S3 run: floor p99 <= 50 ms, goal <= 10 ms), measured as bench/run.py measures one
  broker: open loop, each record stamped with its intended send time, a consumer in its own process; a run that
  falls below 98 % of the rate is saturated and its times are not latencies.
- multi-producer-100B: several producer processes at 100 B, acks=1, 6 partitions, so that the broker, not one
  Python client, is the bottleneck: a standalone Odradek broker (RF 1) beside Tansu 0.6 (in-memory, no fsync, no
  replication: labelled so), and the three-broker cluster at RF 3 acks=all.

Results: bench/results/cluster-<UTC time>.json and bench/results/cluster-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import multiprocessing
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import run as single  # noqa: E402  (bench/run.py: the single-broker harness, Tansu and the client configs)

from deploy.zookeeper import ZooKeeperServer  # noqa: E402

MULTI_CAP_S = 30.0  # each producer process stops sending after this long (a slow target bounds the run)
TARGETS = {"replication_ratio": 0.5, "outage_kill9_s": 5.0, "outage_controlled_s": 1.0}
# performance.md's e2e p99 floor and goal for S3 acks=all at 10k records/s of 1 KiB (ms)
LATENCY_P99_MS = {"floor": 50.0, "goal": 10.0}


def log(msg: str) -> None:
    sys.stderr.write(f"[cluster bench {time.strftime('%H:%M:%S')}] {msg}\n")


def wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception:  # a broker restarting
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"{what} not within {timeout:.0f} s")


class ClusterBroker:
    def __init__(self, broker_id: int, workdir: Path, connect: str) -> None:
        self.broker_id, self.port, self.connect = broker_id, single.free_port(), connect
        self.dir = workdir / f"broker-{broker_id}"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        listener = f"PLAINTEXT://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "broker_runtime",
            "--config",
            str(REPO / "deploy" / "cluster.properties"),
        ]
        for k, v in {"broker.id": self.broker_id, "listeners": listener, "advertised.listeners": listener,
                     "log.dirs": self.dir / "logs", "zookeeper.connect": self.connect,
                     "offsets.topic.replication.factor": 3, "controlled.shutdown.max.retries": 3}.items():  # fmt: skip
            cmd += ["--override", f"{k}={v}"]
        with open(self.dir / "broker.log", "ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"))  # fmt: skip
        wait(lambda: single.api_versions("127.0.0.1", self.port), 60, f"broker {self.broker_id} answering")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)
        self.proc.wait(60)


class Cluster:
    def __init__(self, workdir: Path) -> None:
        self.zookeeper = ZooKeeperServer(workdir / "zookeeper", single.free_port())
        connect = self.zookeeper.connect_string("/odradek")
        self.brokers = {i: ClusterBroker(i, workdir, connect) for i in range(3)}
        self._zk = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> Cluster:
        from kazoo.client import KazooClient

        self.zookeeper.start()
        for b in self.brokers.values():
            b.start()
        self._zk = KazooClient(hosts=self.zookeeper.connect_string("/odradek"))
        self._zk.start(30)
        wait(lambda: len(self._zk.get_children("/brokers/ids")) == 3, 60, "three brokers registered")
        return self

    def stop(self) -> None:
        if self._zk is not None:
            self._zk.stop()
        for b in self.brokers.values():
            if b.alive:
                b.signal(signal.SIGTERM)
        self.zookeeper.stop()

    def cpu(self) -> float:
        """CPU seconds of the three broker processes together."""
        return sum(single.proc_cpu_seconds(b.proc.pid) for b in self.brokers.values() if b.alive)

    def state(self, topic: str, partition: int) -> dict:
        return json.loads(self._zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])

    def create_topic(self, name: str, partitions: int, replication: int, config: dict | None = None) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topic = NewTopic(name, partitions, replication, config=config or {})
        admin.create_topics([topic], operation_timeout=30)[name].result(60)
        self.heal(name, partitions)

    def heal(self, topic: str, partitions: int) -> None:
        """Every broker registered and every replica of the topic in its ISR."""

        def healed() -> bool:
            replicas = json.loads(self._zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
            return len(self._zk.get_children("/brokers/ids")) == 3 and all(
                sorted(self.state(topic, p)["isr"]) == sorted(replicas[str(p)]) for p in range(partitions)
            )

        wait(healed, 120, f"{topic} healed")


# --- scenarios ----------------------------------------------------------------------------------------------


def produce_rate(
    bootstrap: str,
    topic: str,
    size: int,
    records: int,
    cap_s: float,
    acks: str,
    *,
    idempotent: bool = False,
    cpu: dict[str, float] | None = None,
    broker_pids: list[int] | None = None,
) -> float:
    """Acknowledged records per second. `cpu`, when given, gets the CPU seconds per million acknowledged records
    of this producer process ("producer") and of the `broker_pids` processes together ("brokers")."""
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, **single.PRODUCER_CONFIG, "acks": acks,
              "delivery.report.only.error": True, "enable.idempotence": idempotent}  # fmt: skip
    p = Producer(config)
    failed = [0]

    def on_error(err, _msg) -> None:
        failed[0] += err is not None

    p.produce(topic, b"warm", on_delivery=on_error)
    p.flush(30)
    pids = broker_pids or []
    brokers_before = sum(single.proc_cpu_seconds(pid) for pid in pids)
    producer_before = single.self_cpu_seconds()
    payload, sent, t0 = b"x" * size, 0, time.perf_counter()
    while sent < records and time.perf_counter() - t0 < cap_s:
        try:
            p.produce(topic, payload, on_delivery=on_error)
            sent += 1
        except BufferError:
            p.poll(0.001)
        if sent & 0xFFF == 0:
            p.poll(0)
    remaining = p.flush(120)
    acknowledged = sent - remaining - failed[0]
    if cpu is not None and acknowledged:
        cpu["producer"] = (single.self_cpu_seconds() - producer_before) / acknowledged * 1e6
        cpu["brokers"] = (
            (sum(single.proc_cpu_seconds(pid) for pid in pids) - brokers_before) / acknowledged * 1e6
        )
    return acknowledged / (time.perf_counter() - t0)


def replication_ratio(cluster: Cluster, runs: int, records: int, cap_s: float) -> dict[str, Any]:
    cluster.create_topic("bench-rf3", 6, 3, {"min.insync.replicas": "2"})
    cluster.create_topic("bench-rf1", 6, 1, {"min.insync.replicas": "1"})  # acks=all on one replica
    kinds = {  # name: (topic, acks, idempotent)
        "rf3_acks_all": ("bench-rf3", "all", False),
        "rf1_acks_1": ("bench-rf1", "1", False),
        "rf3_acks_all_idempotent": ("bench-rf3", "all", True),
        "rf1_acks_all_idempotent": ("bench-rf1", "all", True),
    }
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    costs: dict[str, dict[str, list[float]]] = {
        k: {"brokers": [], "producer": []} for k in ("rf3_acks_all", "rf1_acks_1")
    }
    pids = [b.proc.pid for b in cluster.brokers.values() if b.proc is not None]
    for i in range(runs + 1):  # the first round is the warm-up
        got, cpu = {}, {}
        for kind, (topic, acks, idem) in kinds.items():
            cpu[kind] = {}
            got[kind] = produce_rate(cluster.bootstrap, topic, 1024, records, cap_s, acks, idempotent=idem,
                                     cpu=cpu[kind], broker_pids=pids)  # fmt: skip
        log(f"run {i}: " + ", ".join(f"{kind} {rate:,.0f} rec/s" for kind, rate in got.items()))
        if i:
            for kind, rate in got.items():
                rates[kind].append(rate)
            for kind, spent in costs.items():
                for side in spent:
                    spent[side].append(cpu[kind].get(side, float("nan")))
    median = {kind: statistics.median(v) for kind, v in rates.items()}
    cost = {kind: {side: statistics.median(v) for side, v in spent.items()} for kind, spent in costs.items()}
    rf1, rf3 = cost["rf1_acks_1"], cost["rf3_acks_all"]
    return {
        **{f"{kind}_records_per_s": v for kind, v in rates.items()},
        "record_bytes": 1024,
        "ratio_of_medians": median["rf3_acks_all"] / median["rf1_acks_1"],
        "idempotent_ratio_of_medians": median["rf3_acks_all_idempotent"] / median["rf1_acks_all_idempotent"],
        "target": TARGETS["replication_ratio"],
        # CPU-s per million records (medians): the three brokers together, and the producer process.
        "cpu_per_million": costs,
        # What the ratio would be, both runs CPU-bound on the same cores, if each follower copy cost what the
        # leader's own append of the record costs at RF1: the brokers' 3 x RF1 plus the producer's RF3 cost.
        "ratio_if_replication_cost_two_more_appends": (rf1["brokers"] + rf1["producer"])
        / (3 * rf1["brokers"] + rf3["producer"]),
    }


def outage(cluster: Cluster, topic: str, signum: int, runs: int) -> dict[str, Any]:
    gaps = [longest_gap(cluster, topic, signum, i) for i in range(runs)]
    cluster.heal(topic, 1)
    return {"longest_gap_s": gaps, "max_s": max(gaps), "median_s": statistics.median(gaps)}


def longest_gap(cluster: Cluster, topic: str, signum: int, run: int) -> float:
    """The longest time without an acknowledgement from the last one before the leader goes until the producer
    has had 500 acknowledgements since; the leader is then started again."""
    from confluent_kafka import Producer

    cluster.heal(topic, 1)
    acks: list[float] = []
    stop = threading.Event()
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 0, "message.timeout.ms": 120000})  # fmt: skip

    def delivered(err, _msg) -> None:
        if err is None:
            acks.append(time.monotonic())

    def write() -> None:
        while not stop.is_set():
            p.produce(topic, b"x" * 100, partition=0, on_delivery=delivered)
            p.poll(0.002)  # the pace of the writes (one every ~2 ms)
        p.flush(120)

    writer = threading.Thread(target=write)
    writer.start()
    # Steady: acknowledged for a second already (the producer's first acknowledgements come in a burst).
    wait(lambda: len(acks) > 200 and time.monotonic() - acks[0] > 1.0, 60, "steady acknowledgements")
    leader = cluster.state(topic, 0)["leader"]
    victim = cluster.brokers[leader]
    went = time.monotonic()
    if signum == signal.SIGKILL:
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(10)
    else:
        victim.signal(signal.SIGTERM)
    wait(lambda: len([a for a in acks if a > went]) > 500, 120, "acknowledgements again")
    stop.set()
    writer.join(180)
    before = [a for a in acks if a <= went]
    window = [before[-1], *(a for a in acks if a > went)]
    gap = max(b - a for a, b in itertools.pairwise(window))
    log(f"{'kill -9' if signum == signal.SIGKILL else 'controlled shutdown'} of leader {leader}, run {run}: "
        f"longest gap {gap * 1000:.0f} ms")  # fmt: skip
    victim.start()
    return gap


def _producer_process(bootstrap: str, topic: str, records: int, acks: str, barrier, out) -> None:
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, **single.PRODUCER_CONFIG, "acks": acks,
              "delivery.report.only.error": True}  # fmt: skip
    if acks == "all":
        config["enable.idempotence"] = True
    p = Producer(config)
    p.produce(topic, b"warm")
    p.flush(30)
    barrier.wait()
    t0, sent, payload = time.perf_counter(), 0, b"x" * 100
    while sent < records and (sent & 0xFFF or time.perf_counter() - t0 < MULTI_CAP_S):
        try:
            p.produce(topic, payload)
            sent += 1
        except BufferError:
            p.poll(0.001)
    remaining = p.flush(120)
    out.put((sent - remaining, t0, time.perf_counter()))


def multi_producer(bootstrap: str, topic: str, processes: int, records: int, acks: str) -> float:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_producer_process, args=(bootstrap, topic, records, acks, barrier, out))
             for _ in range(processes)]  # fmt: skip
    for proc in procs:
        proc.start()
    results = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(60)
    delivered = sum(r[0] for r in results)
    return delivered / (max(r[2] for r in results) - min(r[1] for r in results))


def multi_producer_all(cluster: Cluster, workdir: Path, runs: int, processes: int, records: int) -> dict:
    result: dict[str, Any] = {"processes": processes, "records_per_process": records, "record_bytes": 100}
    cluster.create_topic("bench-multi-rf3", 6, 3, {"min.insync.replicas": "2"})
    rf3 = [
        multi_producer(cluster.bootstrap, "bench-multi-rf3", processes, records, "all") for _ in range(runs)
    ]
    result["cluster_rf3_acks_all"] = rf3
    log(f"multi-producer, three brokers, RF3 acks=all: {rf3}")
    for target in ("odradek", "tansu"):
        broker = single.Broker(target, workdir / f"single-{target}")
        try:
            broker.start()
        except Exception as exc:  # Tansu's binary missing: say so
            result[f"single_{target}"] = f"not run: {exc}"
            continue
        try:
            single.create_topic(broker.bootstrap, "bench-multi", 6)
            result[f"single_{target}"] = [multi_producer(broker.bootstrap, "bench-multi", processes, records, "1")
                                          for _ in range(runs)]  # fmt: skip
            log(f"multi-producer single {target}: {result[f'single_{target}']}")
        finally:
            broker.stop()
    return result


# --- report -------------------------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    r = report["scenarios"]
    lines = [f"# Cluster benchmarks, {report['time']}", "",
             f"Machine: {report['machine']}; load average at the start {report['load_average']}; three local "
             "brokers (deploy/cluster.properties), confluent-kafka.", "", "| scenario | result | target |",
             "|---|---|---|"]  # fmt: skip
    if "replication_ratio" in r:
        s = r["replication_ratio"]
        lines.append(f"| 1 KiB, 6 partitions: RF3 acks=all / RF1 acks=1 | {s['ratio_of_medians']:.2f} "
                     f"({statistics.median(s['rf3_acks_all_records_per_s']):,.0f} / "
                     f"{statistics.median(s['rf1_acks_1_records_per_s']):,.0f} rec/s) | >= 0.5 |")  # fmt: skip
        c = {kind: {side: statistics.median(v) for side, v in spent.items()}
             for kind, spent in s["cpu_per_million"].items()}  # fmt: skip
        lines.append(f"| CPU-s per million records, brokers + producer: RF3 acks=all / RF1 acks=1 | "
                     f"{c['rf3_acks_all']['brokers']:.1f} + {c['rf3_acks_all']['producer']:.1f} / "
                     f"{c['rf1_acks_1']['brokers']:.1f} + {c['rf1_acks_1']['producer']:.1f} | |")  # fmt: skip
        lines.append(f"| ratio if each follower copy cost the brokers what an RF1 append does | "
                     f"{s['ratio_if_replication_cost_two_more_appends']:.2f} | |")  # fmt: skip
        lines.append(f"| same, idempotent producer: RF3 / RF1, both acks=all | "
                     f"{s['idempotent_ratio_of_medians']:.2f} "
                     f"({statistics.median(s['rf3_acks_all_idempotent_records_per_s']):,.0f} / "
                     f"{statistics.median(s['rf1_acks_all_idempotent_records_per_s']):,.0f} rec/s) | |")  # fmt: skip
    for key, label, target in (("outage_kill9", "write outage after kill -9 of the leader", "<= 5 s"),
                               ("outage_controlled", "write outage after a controlled shutdown", "well under 1 s")):  # fmt: skip
        if key in r:
            lines.append(
                f"| {label} | max {r[key]['max_s']:.2f} s, median {r[key]['median_s']:.2f} s | {target} |"
            )
    for kind, label in (("acks_all", "RF3 acks=all"), ("acks_all_idempotent", "RF3 acks=all, idempotent")):
        s = r.get("latency", {}).get(kind)
        if s is None:
            continue
        name = f"e2e latency, 10k rec/s of 1 KiB, {label}"
        target = f"p99 <= {LATENCY_P99_MS['floor']:.0f} ms (goal {LATENCY_P99_MS['goal']:.0f})"
        if "error" in s:
            lines.append(f"| {name} | {s['error']} | {target} |")
        elif s["saturated"]:
            lines.append(f"| {name} | saturated: {s['achieved_rate']:,.0f} rec/s, produce-ack p50 "
                         f"{s['produce_ack']['p50_ms']:,.0f} ms (not latencies) | {target} |")  # fmt: skip
        elif "p99_ms" not in s["e2e"] or s["e2e"]["max_ms"] is None:
            lines.append(f"| {name} | no latencies: {s['e2e']} | {target} |")
        else:
            e = s["e2e"]
            lines.append(f"| {name}: p50 / p99 / p99.9 / max | {e['p50_ms']:.1f} / {e['p99_ms']:.1f} / "
                         f"{e['p999_ms']:.1f} / {e['max_ms']:.1f} ms (produce-ack p99 "
                         f"{s['produce_ack']['p99_ms']:.1f} ms) | {target} |")  # fmt: skip
    if "multi_producer" in r:
        s = r["multi_producer"]
        for key, label in (("single_odradek", "Odradek, one broker, acks=1 (disk)"),
                           ("single_tansu", "Tansu 0.6, one broker, acks=1 (in-memory)"),
                           ("cluster_rf3_acks_all", "Odradek, three brokers, RF3 acks=all")):  # fmt: skip
            v = s.get(key)
            shown = f"{statistics.median(v):,.0f} rec/s" if isinstance(v, list) else str(v)
            lines.append(f"| {s['processes']} producer processes, 100 B: {label} | {shown} | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="ratio,kill9,controlled,multi,latency")
    args = ap.parse_args()
    only = set(args.only.split(","))
    runs = 1 if args.quick else 3
    report: dict[str, Any] = {
        "time": dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"), "machine": platform.node(),
        "cpus": os.cpu_count(), "load_average": os.getloadavg(), "quick": args.quick, "scenarios": {},
        "targets": {**TARGETS, "latency_p99_ms": LATENCY_P99_MS},
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="odradek-cluster-bench-") as tmp:
        cluster = Cluster(Path(tmp)).start()
        try:
            s = report["scenarios"]
            if "ratio" in only:
                s["replication_ratio"] = replication_ratio(cluster, runs, 20_000 if args.quick else 200_000,
                                                           10 if args.quick else 30)  # fmt: skip
            if {"kill9", "controlled"} & only:
                cluster.create_topic("bench-outage", 1, 3, {"min.insync.replicas": "2"})
            if "kill9" in only:
                s["outage_kill9"] = outage(cluster, "bench-outage", signal.SIGKILL, runs)
            if "controlled" in only:
                s["outage_controlled"] = outage(cluster, "bench-outage", signal.SIGTERM, runs)
            if "multi" in only:
                s["multi_producer"] = multi_producer_all(cluster, Path(tmp), runs, 4,
                                                         20_000 if args.quick else 250_000)  # fmt: skip
            # last: its topics (two of RF 3, about 0.7 GB a replica) would weigh on the scenarios after it
            if "latency" in only:
                s["latency"] = {}
                for kind, idempotent in (("acks_all", False), ("acks_all_idempotent", True)):
                    try:
                        s["latency"][kind] = single.run_latency(
                            cluster, 10_000, 1024, 5 if args.quick else 60, 2 if args.quick else 10,
                            replication=3, acks="all", idempotent=idempotent,
                        )  # fmt: skip
                    except Exception as exc:  # a failed scenario is reported, the others still run
                        s["latency"][kind] = {"error": repr(exc)}
                    log(f"latency, {kind}: {s['latency'][kind]}")
        finally:
            cluster.stop()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"cluster-{report['time']}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "cluster-latest.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
