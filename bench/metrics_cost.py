#!/usr/bin/env python
"""What broker metrics cost the produce and fetch paths (part of `make bench`).

    python bench/metrics_cost.py            # 8 measured rounds per side
    python bench/metrics_cost.py --quick    # 4 rounds, smaller runs

Four standalone Odradek brokers in the same run, started alike: two with `odradek.metrics.listener` set, each
scraped every second by a process of its own (as Prometheus would), two without it (then the broker counts
nothing). Rounds alternate between the sides and go through the two brokers of each side in turn, the side
that goes first swapping every two rounds (one discarded warm-up round per broker), so that the machine's noise
and whatever tells two broker processes apart fall on both sides alike. `--aa` runs the same with no broker
serving metrics: the noise floor of the method. Each round produces 100-byte records to a 6-partition topic with confluent-kafka (acks=1,
run.py's producer settings), then reads them back with one consumer.

The primary measure is broker CPU seconds per million records (utime + stime of the broker process, from
/proc), because the machine is shared and throughput moves with whatever else runs; records/s is reported
beside it. Each broker runs on its own core apart from this process when taskset exists (run.py's pinning).
Results: bench/results/metrics-cost-<UTC time>.json and bench/results/metrics-cost-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import (
    RESULTS,
    Broker,
    consume_once,
    create_topic,
    free_port,
    log,
    machine_facts,
    produce_once,
)

PARTITIONS = 6
SIZE = 100
IDLE_S = 10.0
INSTANCES = 2


SCRAPE_LOOP = """
import sys, time, urllib.request
url, interval = sys.argv[1], float(sys.argv[2])
while True:
    time.sleep(interval)
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            print("ok", len(response.read()), flush=True)
    except OSError as exc:
        print("fail", exc, flush=True)
"""


class Scraper:
    """GET /metrics every `interval_s` seconds from a process of its own (as Prometheus scrapes from outside; a
    thread here would take the load generator's GIL)."""

    def __init__(self, url: str, interval_s: float = 1.0) -> None:
        self.url, self.interval_s = url, interval_s
        self.scrapes = self.failures = 0
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SCRAPE_LOOP, self.url, str(self.interval_s)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate(10)
        lines = out.splitlines()
        self.scrapes = sum(1 for line in lines if line.startswith("ok "))
        self.failures = len(lines) - self.scrapes


def one_round(broker: Broker, records: int, cap_s: float) -> dict[str, Any]:
    topic = f"cost-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produced = produce_once(broker, topic, SIZE, records, cap_s)
    cpu0 = broker.cpu()
    consumed = consume_once(broker, topic, PARTITIONS, SIZE, cap_s * 2)
    consume_cpu = broker.cpu() - cpu0
    return {
        "produce_records_per_s": produced["records_per_s"],
        "produce_cpu_s_per_million": produced["broker_cpu_s_per_million"],
        "produce_client_bound": produced["client_bound"],
        "consume_records_per_s": consumed["records_per_s"],
        # consume_once's window ends when the last record arrived; the CPU here also covers the consumer's close
        "consume_cpu_s_per_million": consume_cpu / consumed["records"] * 1e6 if consumed["records"] else None,
        "consume_complete": consumed["records"] >= consumed["available"],
    }


def produce_requests_per_million(page: bytes) -> float | None:
    """Produce requests per million records appended, from one scraped broker's own counters."""
    from prometheus_client.parser import text_string_to_metric_families

    requests = records = 0.0
    for family in text_string_to_metric_families(page.decode()):
        for sample in family.samples:
            if (
                sample.name == "kafka_network_requestmetrics_requests_total"
                and sample.labels["request"] == "Produce"
            ):
                requests += sample.value
            elif (
                sample.name == "kafka_server_brokertopicmetrics_messagesin_total"
                and "topic" not in sample.labels
            ):
                records = sample.value
    return requests / records * 1e6 if records else None


def med(rounds: list[dict], key: str) -> float | None:
    values = [r[key] for r in rounds if r.get(key) is not None]
    return statistics.median(values) if values else None


def paired_changes(off: list[dict], on: list[dict], key: str) -> list[float]:
    """Per round, on against off in percent: the two ran back to back, so they share the machine's state."""
    return sorted(
        (b[key] - a[key]) / a[key] * 100
        for a, b in zip(off, on, strict=True)
        if a.get(key) and b.get(key) is not None
    )


def markdown(result: dict[str, Any]) -> str:
    off, on = result["summary"]["off"], result["summary"]["on"]

    def row(label: str, key: str, digits: int) -> str:
        a, b = off[key], on[key]
        change = f"{(b - a) / a * 100:+.1f} %" if a and b is not None else "n/a"
        paired = paired_changes(result["off"], result["on"], key)
        spread = (
            f"{statistics.median(paired):+.1f} % ({paired[len(paired) // 4]:+.1f} to {paired[-1 - len(paired) // 4]:+.1f})"
            if paired
            else "n/a"
        )
        return f"| {label} | {a:,.{digits}f} | {b:,.{digits}f} | {change} | {spread} |"

    lines = [
        "# Broker metrics: cost on the produce and fetch paths",
        "",
        f"Run {result['started']} ({result['profile']}, {result['rounds']} measured rounds per side, alternating; "
        f"{result['records']:,} records of {SIZE} B per round to {PARTITIONS} partitions). Medians. "
        '"on": `odradek.metrics.listener` set and scraped every second '
        f"({result['scrapes']} scrapes, {result['scrape_failures']} failed, "
        f'{result["scrape_bytes_median"]:,} bytes each); "off": not set.',
        "",
        "| measure | metrics off | metrics on (scraped 1/s) | change of the medians | paired rounds: median change (quartiles) |",
        "|---|---:|---:|---:|---:|",
        row("produce: broker CPU s per million records (primary)", "produce_cpu_s_per_million", 3),
        row("consume: broker CPU s per million records (primary)", "consume_cpu_s_per_million", 3),
        row("produce: records/s", "produce_records_per_s", 0),
        row("consume: records/s", "consume_records_per_s", 0),
        "",
        f"Idle for {IDLE_S:.0f} s side by side: {result['idle_cpu_s']['off']:.2f} CPU s for the two brokers "
        f"without metrics, {result['idle_cpu_s']['on']:.2f} s for the two scraped every second, so about "
        f"{result['scrape_cpu_ms']:.1f} ms of broker CPU per scrape (CPU time is counted in 10 ms ticks).",
        "",
        f"A broker with metrics counts each request and each partition it appends to or reads from (a few "
        f"integer additions); the scraped brokers answered {result['produce_requests_per_million'] or 0:,.0f} "
        "Produce requests per million records.",
        "",
        "Per round (off / on):",
        "",
        "| round | produce CPU s/M off | on | consume CPU s/M off | on | produce rec/s off | on |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for i, (a, b) in enumerate(zip(result["off"], result["on"], strict=True), 1):
        lines.append(
            f"| {i} | {a['produce_cpu_s_per_million']:.3f} | {b['produce_cpu_s_per_million']:.3f} | "
            f"{a['consume_cpu_s_per_million']:.3f} | {b['consume_cpu_s_per_million']:.3f} | "
            f"{a['produce_records_per_s']:,.0f} | {b['produce_records_per_s']:,.0f} |"
        )
    lines += [
        "",
        "The machine is shared (other work runs beside the benchmark), so single rounds scatter; the two sides "
        "alternate so that the scatter falls on both. Scrapes read broker state on the broker's event loop; "
        "their own CPU lands between the measured windows as well as inside them.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--aa", action="store_true", help="calibration: neither broker serves metrics (printed, not written)"
    )
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=1.0,
        help="seconds between scrapes; 0: the listener is not scraped",
    )
    args = parser.parse_args()
    rounds = 4 if args.quick else 8
    records, cap_s = (500_000, 5.0) if args.quick else (2_000_000, 10.0)
    workdir = Path(tempfile.mkdtemp(prefix="odradek-metrics-cost-"))
    # Two brokers per side, so that whatever tells two broker processes apart (start order, memory layout) is
    # spread over both sides; rounds go through them in turn.
    ports = [free_port() for _ in range(INSTANCES)]
    brokers = {("off", k): Broker("odradek", workdir / f"off-{k}") for k in range(INSTANCES)} | {
        ("on", k): Broker(
            "odradek",
            workdir / f"on-{k}",
            {} if args.aa else {"odradek.metrics.listener": f"http://127.0.0.1:{ports[k]}"},
        )
        for k in range(INSTANCES)
    }
    scrapers = [Scraper(f"http://127.0.0.1:{port}/metrics", args.scrape_interval or 1.0) for port in ports]
    results: dict[str, list[dict]] = {"off": [], "on": []}
    started = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        for broker in brokers.values():
            broker.start()
        if not args.aa and args.scrape_interval > 0:
            for scraper in scrapers:
                scraper.start()
        for side, k in brokers:
            log(f"metrics cost: warm-up ({side} {k})")
            one_round(brokers[side, k], records // 3, cap_s)
        for i in range(rounds):
            k = i % INSTANCES
            for side in ("off", "on") if (i // INSTANCES) % 2 == 0 else ("on", "off"):
                r = one_round(brokers[side, k], records, cap_s)
                results[side].append(r)
                log(
                    f"metrics cost: round {i + 1} {side} {k}: produce {r['produce_records_per_s']:,.0f} rec/s "
                    f"{r['produce_cpu_s_per_million']:.3f} CPU s/M; consume "
                    f"{r['consume_records_per_s']:,.0f} rec/s {r['consume_cpu_s_per_million']:.3f} CPU s/M"
                )
        probe = b"" if args.aa else urllib.request.urlopen(scrapers[0].url, timeout=5).read()
        # What the scrapes themselves cost: the brokers idle side by side for a while, half of them scraped.
        idle0 = {key: b.cpu() for key, b in brokers.items()}
        time.sleep(IDLE_S)
        idle = {side: 0.0 for side in ("off", "on")}
        for (side, k), b in brokers.items():
            idle[side] += b.cpu() - idle0[side, k]
    finally:
        for scraper in scrapers:
            scraper.stop()
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    keys = (
        "produce_cpu_s_per_million",
        "consume_cpu_s_per_million",
        "produce_records_per_s",
        "consume_records_per_s",
    )
    result = {
        "started": started,
        "profile": "quick" if args.quick else "full",
        "rounds": rounds,
        "records": records,
        "scrapes": sum(scraper.scrapes for scraper in scrapers),
        "scrape_failures": sum(scraper.failures for scraper in scrapers),
        "scrape_bytes_median": len(probe),
        "summary": {side: {k: med(rs, k) for k in keys} for side, rs in results.items()},
        "idle_cpu_s": idle,
        "produce_requests_per_million": produce_requests_per_million(probe) if probe else None,
        "scrape_cpu_ms": (idle["on"] - idle["off"]) / (INSTANCES * IDLE_S / scrapers[0].interval_s) * 1000,
        **results,
        "machine": machine_facts(workdir),
    }
    if args.aa or args.scrape_interval != 1.0:  # experiments: printed, not written
        print(markdown(result))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"metrics-cost-{started}.json").write_text(json.dumps(result, indent=2))
    (RESULTS / "metrics-cost-latest.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
