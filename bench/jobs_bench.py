#!/usr/bin/env python
"""`make bench` (second part): the report jobs' read path against a plain confluent-kafka consumer, same data,
same run.

    python bench/jobs_bench.py                 # 1 GiB of 200-byte values over 4 partitions
    python bench/jobs_bench.py --mb 20         # a quick check that it works

One Odradek broker (bench/run.py's ``Broker``, pinned to CPU 1 when taskset exists) is filled with ``--mb`` MiB
of payload (16-byte keys, ``--value-bytes`` values). Then, from offset 0 of every partition:

- ``plain-consumer``: one confluent-kafka consumer (assign, ``consume(10000)``) reading every record and
  touching its key and value, as the simplest Python reader would: records/s and MB/s of payload;
- ``data-source``: ``spark.read.format("odradek")`` counting records and summing key and value lengths, in
  ``--master`` (default ``local[2]``), twice (the first also starts the Python workers): records/s, MB/s;
- ``throughput-report`` and ``retention-report``: whole report runs (``run_report``) over the topic: seconds and
  seconds per GB of log (log bytes as the broker reports them in DescribeLogDirs).

The SparkSession's start-up (about 10 s here) is reported apart and excluded from the rates.
Results: bench/results/jobs-<UTC timestamp>.json and bench/results/jobs-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run import RESULTS, Broker, create_topic, log, machine_facts  # noqa: E402 - bench/run.py, a sibling script

KEY_BYTES = 16


def produce(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": 1,
        }
    )
    value = os.urandom(value_bytes)
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"%016d" % i, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged")
    return time.monotonic() - started


def plain_consumer(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "jobs-bench",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    total = sum(ends.values())
    records = payload = 0
    started = time.monotonic()
    while records < total:
        for m in consumer.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                records += 1
                payload += len(m.key()) + len(m.value())
    elapsed = time.monotonic() - started
    consumer.close()
    return {"seconds": elapsed, "records": records, "payload_bytes": payload}


def data_source(spark, bootstrap: str, topic: str) -> dict[str, Any]:
    from pyspark.sql import functions as F

    started = time.monotonic()
    row = (
        spark.read.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .agg(F.count(F.lit(1)).alias("records"), F.sum(F.length("key") + F.length("value")).alias("payload"))
        .collect()[0]
    )
    return {"seconds": time.monotonic() - started, "records": row["records"], "payload_bytes": row["payload"]}


def rates(result: dict[str, Any]) -> dict[str, Any]:
    s = result["seconds"]
    return {
        **result,
        "records_per_s": result["records"] / s,
        "payload_mb_per_s": result["payload_bytes"] / 1e6 / s,
    }


def report_run(report_module, bootstrap: str, topic: str, workdir: Path, log_bytes: int) -> dict[str, Any]:
    from jobs.report import run_report

    out = workdir / report_module.REPORT.name
    started = time.monotonic()
    code = run_report(
        report_module.REPORT,
        ["--bootstrap-servers", bootstrap, "--topics", topic, "--since", "1d", "--output", str(out)],
    )
    seconds = time.monotonic() - started
    summary = json.loads((out / "summary.json").read_text())
    if code != 0:
        raise RuntimeError(f"{report_module.REPORT.name} report failed: {summary.get('error')}")
    return {
        "seconds": seconds,
        "rows_read": summary["rows_read"],
        "log_bytes": log_bytes,
        "seconds_per_gb": seconds / (log_bytes / 1e9),
    }


def markdown(result: dict[str, Any]) -> str:
    p = result["parameters"]
    lines = [
        "# Report jobs: the data source against a plain consumer",
        "",
        f"Run {result['started_at']}; {p['mb']} MiB of payload, {p['records']:,} records of {KEY_BYTES}-byte keys and "
        f"{p['value_bytes']}-byte values over {p['partitions']} partitions; log {result['log_bytes'] / 1e6:.1f} MB on disk. "
        f"Spark master {p['master']}; SparkSession start {result['spark_start_s']:.1f} s (not in the rates).",
        "",
        "| reader | seconds | records/s | payload MB/s |",
        "|---|---:|---:|---:|",
    ]
    for name in ("plain_consumer", "data_source_first", "data_source"):
        r = result[name]
        lines.append(
            f"| {name.replace('_', '-')} | {r['seconds']:.2f} | {r['records_per_s']:,.0f} | {r['payload_mb_per_s']:.1f} |"
        )
    lines += ["", "| report | seconds | seconds per GB of log | rows read |", "|---|---:|---:|---:|"]
    for name in ("throughput_report", "retention_report"):
        r = result[name]
        lines.append(
            f"| {name.replace('_', '-')} | {r['seconds']:.2f} | {r['seconds_per_gb']:.1f} | {r['rows_read']:,} |"
        )
    lines += [
        "",
        "The plain consumer is one Python thread touching each record's key and value; the data source runs one "
        "Spark task per partition range, in as many task slots as the master gives, and hands Arrow batches to "
        "Spark. `data-source-first` includes starting the Python workers. Machine: "
        f"{_cpu_model(result['machine'])}, {os.cpu_count()} cores; the broker pinned to one core when taskset exists.",
        "",
    ]
    return "\n".join(lines)


def _cpu_model(machine: dict[str, Any]) -> str:
    for line in str(machine.get("lscpu", "")).splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mb", type=int, default=1024, help="MiB of payload to write and read (default 1024)"
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--keep", action="store_true", help="keep the broker's data and the report outputs")
    args = parser.parse_args()

    records = args.mb * 1024 * 1024 // (KEY_BYTES + args.value_bytes)
    workdir = Path(
        tempfile.mkdtemp(prefix="jobs-bench-", dir=REPO / "var" if (REPO / "var").exists() else None)
    )
    broker = Broker("odradek", workdir / "broker")
    started_at = dt.datetime.now(dt.UTC)
    result: dict[str, Any] = {
        "started_at": started_at.isoformat(),
        "parameters": {**vars(args), "records": records},
        "machine": machine_facts(workdir),
    }
    try:
        broker.start()
        topic = "jobs-bench"
        create_topic(broker.bootstrap, topic, args.partitions)
        log(f"producing {records:,} records ({args.mb} MiB payload)")
        result["produce_s"] = produce(broker.bootstrap, topic, args.partitions, records, args.value_bytes)

        from jobs.cluster import ClusterClient, client_config

        cluster = ClusterClient(client_config(broker.bootstrap))
        ends = {p: o for (_, p), o in cluster.latest([(topic, p) for p in range(args.partitions)]).items()}
        result["log_bytes"] = sum(size for (_, t, _), size in cluster.log_dir_sizes().items() if t == topic)

        log("plain confluent-kafka consumer")
        result["plain_consumer"] = rates(plain_consumer(broker.bootstrap, topic, ends))
        log("SparkSession")
        t0 = time.monotonic()
        from jobs.spark import spark_session

        spark = spark_session("jobs-bench", master=args.master, conf={"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        result["spark_start_s"] = time.monotonic() - t0
        log("data source (twice)")
        result["data_source_first"] = rates(data_source(spark, broker.bootstrap, topic))
        result["data_source"] = rates(data_source(spark, broker.bootstrap, topic))
        for name in ("plain_consumer", "data_source"):
            if result[name]["records"] != records:
                raise RuntimeError(f"{name} read {result[name]['records']} records, expected {records}")

        from jobs import retention_report, throughput_report

        log("throughput report")
        result["throughput_report"] = report_run(
            throughput_report, broker.bootstrap, topic, workdir, result["log_bytes"]
        )
        log("retention report")
        result["retention_report"] = report_run(
            retention_report, broker.bootstrap, topic, workdir, result["log_bytes"]
        )
    finally:
        broker.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = started_at.strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"jobs-{stamp}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    text = markdown(result)
    (RESULTS / "jobs-latest.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
