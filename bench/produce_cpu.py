#!/usr/bin/env python
"""Broker CPU per million produced records, this tree against other checkouts, interleaved in one run.

    .venv/bin/python bench/produce_cpu.py --baseline /tmp/odradek-old [--baseline ...] [--runs 5]
    .venv/bin/python bench/produce_cpu.py --baseline /tmp/odradek-old --profile var/bench/prof
    .venv/bin/python bench/produce_cpu.py --baseline /tmp/odradek-old --py-spy var/bench/spy --no-save

The scenario is bench/run.py's produce-1KiB-6p (one confluent-kafka producer, 1 KiB records, 6 partitions,
linger.ms=5, batch.size=16384, acks=1): one broker per tree, all started fresh, then runs rotating between them
so that whatever else the machine is doing weighs on all alike. The number compared is the broker process's CPU
seconds (utime + stime from /proc, all threads) per million acknowledged records, which a busy machine disturbs
far less than wall-clock throughput; records/s is shown beside it, and the Produce requests the producer sent
(librdkafka's statistics): CPU per record is only comparable at the same records per request. A baseline runs
with this tree's Python and virtualenv, its own sources first on the path (a compiled extension it needs must
be built there: `python setup.py build_ext --inplace`).

`--profile DIR` runs each broker under cProfile (sys.setprofile costs CPU of its own: compare profiles with
each other, not with the numbers of a run without it) and writes DIR/<label>.prof at SIGTERM; `--py-spy DIR`
samples them with py-spy instead (DIR/<label>.txt, collapsed stacks).

Results: bench/results/produce-cpu-<UTC timestamp>.json and bench/results/produce-cpu-latest.md.
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
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run

REPO = run.REPO
SIZE, PARTITIONS = 1024, 6

# cProfile around `python -m broker_runtime`, dumped when SIGTERM stops the broker
_PROFILED_MAIN = """
import cProfile, runpy, signal, sys
out = sys.argv.pop(1)
profiler = cProfile.Profile()
def dump(*_):
    profiler.disable(); profiler.dump_stats(out)
import atexit; atexit.register(dump)
sys.argv[0] = "broker_runtime"
profiler.enable()
try:
    runpy.run_module("broker_runtime", run_name="__main__", alter_sys=True)
finally:
    dump()
"""


class TreeBroker(run.Broker):
    """bench/run.py's Odradek broker, started from the sources of `tree`."""

    def __init__(self, tree: Path, workdir: Path, profile_to: Path | None) -> None:
        super().__init__("odradek", workdir)
        self.tree = tree
        self.profile_to = profile_to

    def command(self) -> list[str]:
        cmd = super().command()
        config = str(REPO / "deploy" / "standalone.properties")
        cmd = [str(self.tree / "deploy" / "standalone.properties") if c == config else c for c in cmd]
        if self.profile_to is not None:
            at = cmd.index("-m")
            cmd[at : at + 2] = ["-c", _PROFILED_MAIN, str(self.profile_to)]
        return cmd

    def start(self, timeout: float = 60.0) -> TreeBroker:
        # run.Broker starts in REPO with REPO's sources; point both at the tree
        saved_repo, saved_env = run.REPO, os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(self.tree)
        run.REPO = self.tree
        try:
            super().start(timeout)
        finally:
            run.REPO = saved_repo
            if saved_env is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved_env
        return self


def produce_run(broker: TreeBroker, topic: str, records: int, cap_s: float) -> dict:
    """bench/run.py's producer run, counting the Produce requests too (librdkafka's statistics): how many
    records each request carried decides the CPU per record as much as the broker does."""
    from confluent_kafka import Producer

    produce_requests = [0]

    def on_stats(raw: str) -> None:
        stats = json.loads(raw)
        produce_requests[0] = sum(b.get("req", {}).get("Produce", 0) for b in stats["brokers"].values())

    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            **run.PRODUCER_CONFIG,
            "delivery.report.only.error": True,
            "statistics.interval.ms": 100,
            "stats_cb": on_stats,
        }
    )
    failed = [0]

    def on_error(err, _msg) -> None:
        if err is not None:
            failed[0] += 1

    payload = b"x" * SIZE
    p.produce(topic, b"warm", on_delivery=on_error)
    p.flush(30)
    p.poll(0.25)  # a statistics callback: the requests so far
    requests_before = produce_requests[0]
    cpu0, t0 = broker.cpu(), time.perf_counter()
    sent = run.produce_flat_out(p, topic, payload, records, t0 + cap_s, on_error)
    remaining = p.flush(60)
    elapsed = time.perf_counter() - t0
    cpu = broker.cpu() - cpu0
    p.poll(0.25)
    requests = produce_requests[0] - requests_before
    delivered = sent - remaining - failed[0]
    return {
        "records": delivered,
        "failed": failed[0] + remaining,
        "seconds": elapsed,
        "records_per_s": delivered / elapsed,
        "broker_cpu_s": cpu,
        "broker_cpu_pct": 100 * cpu / elapsed,
        "broker_cpu_s_per_million": cpu / delivered * 1e6,
        "produce_requests": requests,
        "records_per_request": delivered / requests if requests else None,
        "broker_cpu_us_per_request": cpu / requests * 1e6 if requests else None,
    }


def _short_commit(tree: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return out or tree.name


def git_describe(tree: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return out[:100] or str(tree)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline", type=Path, action="append", required=True,
        help="checkout of a commit to compare with (repeatable: every one runs in the same rotation)",
    )  # fmt: skip
    parser.add_argument("--runs", type=int, default=5, help="measured runs per broker (after one warm-up)")
    parser.add_argument("--records", type=int, default=300_000, help="records per run")
    parser.add_argument("--cap-s", type=float, default=8.0, help="time cap per run")
    parser.add_argument(
        "--profile", type=Path, help="run both brokers under cProfile, profiles into this dir"
    )
    parser.add_argument(
        "--py-spy", type=Path, help="sample both brokers with py-spy during the measured runs"
    )
    parser.add_argument("--no-save", action="store_true", help="print only, write no results file")
    args = parser.parse_args()

    trees = {f"baseline-{_short_commit(tree)}": tree.resolve() for tree in args.baseline}
    trees["head"] = REPO
    workroot = Path(
        tempfile.mkdtemp(prefix="produce-cpu-", dir=REPO / "var" if (REPO / "var").is_dir() else None)
    )
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    brokers: dict[str, TreeBroker] = {}
    samples: dict[str, list[dict]] = {label: [] for label in trees}
    try:
        for label, tree in trees.items():
            prof = (args.profile.resolve() / f"{label}.prof") if args.profile else None
            brokers[label] = TreeBroker(tree, workroot / label, prof).start()
            run.log(f"{label}: {git_describe(tree)} on {brokers[label].bootstrap}")
        topics = {}
        for label, broker in brokers.items():
            topics[label] = f"bench-cpu-{uuid.uuid4().hex[:6]}"
            run.create_topic(broker.bootstrap, topics[label], PARTITIONS)
            produce_run(broker, topics[label], args.records // 3, args.cap_s)  # warm-up
        spies = []
        if args.py_spy:
            args.py_spy.mkdir(parents=True, exist_ok=True)
            spy = Path(sys.executable).parent / "py-spy"
            for label, broker in brokers.items():
                out = args.py_spy.resolve() / f"{label}.txt"
                spies.append(subprocess.Popen(
                    [str(spy), "record", "--nonblocking", "-r", "997", "-f", "raw", "-o", str(out), "-p",
                     str(broker.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        for i in range(args.runs):
            order = list(brokers) if i % 2 == 0 else list(reversed(brokers))  # nobody always first
            for label in order:
                r = produce_run(brokers[label], topics[label], args.records, args.cap_s)
                samples[label].append(r)
                run.log(
                    f"{label} run {i + 1}: {r['broker_cpu_s_per_million']:.2f} CPU-s/M, "
                    f"{r['records_per_s'] / 1000:.0f}k rec/s, broker {r['broker_cpu_pct']:.0f}% CPU, "
                    f"{r['records_per_request'] or 0:.1f} records and {r['broker_cpu_us_per_request'] or 0:.0f} us "
                    "CPU per request"
                )
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(workroot, ignore_errors=True)

    summary = {
        label: {
            "commit": git_describe(trees[label]),
            "cpu_s_per_million": run.summarize([r["broker_cpu_s_per_million"] for r in rs]),
            "records_per_s": run.summarize([r["records_per_s"] for r in rs]),
            "broker_cpu_pct": run.summarize([r["broker_cpu_pct"] for r in rs]),
            "records_per_request": run.summarize([r["records_per_request"] or 0 for r in rs]),
            "cpu_us_per_request": run.summarize([r["broker_cpu_us_per_request"] or 0 for r in rs]),
            "failed": sum(r["failed"] for r in rs),
        }
        for label, rs in samples.items()
    }
    print(json.dumps(summary, indent=2))
    if args.no_save or args.profile:
        return
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    run.RESULTS.mkdir(parents=True, exist_ok=True)
    load_after = os.getloadavg()
    facts = {
        "load_average_1m_before_after": [load_before[0], load_after[0]],
        "scenario": "produce-1KiB-6p",
        "runs": args.runs,
        "records_per_run": args.records,
        "taskset": run.HAVE_TASKSET,
    }
    (run.RESULTS / f"produce-cpu-{stamp}.json").write_text(
        json.dumps({**facts, "summary": summary, "samples": samples}, indent=2)
    )
    lines = [
        f"# Produce path: broker CPU per million records, A/B ({stamp})",
        "",
        f"produce-1KiB-6p, one confluent-kafka producer, {args.runs} interleaved runs of {args.records} records "
        f"per broker after a warm-up; brokers pinned to CPU {run.BROKER_CPU}, load on CPU {run.LOAD_CPU}"
        if run.HAVE_TASKSET
        else "(no taskset)",
        f"({os.cpu_count()} CPUs shared with other work: 1-minute load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after)",
        "",
        "| broker | commit | CPU-s / M records (median, min-max) | records/s (median, min-max) | broker CPU % "
        "| records / request | CPU µs / request |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, s in summary.items():
        c, r, p = s["cpu_s_per_million"], s["records_per_s"], s["broker_cpu_pct"]
        q, u = s["records_per_request"], s["cpu_us_per_request"]
        lines.append(
            f"| {label} | {s['commit']} | {c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f}) | "
            f"{r['median'] / 1000:.0f}k ({r['min'] / 1000:.0f}k-{r['max'] / 1000:.0f}k) | {p['median']:.0f} | "
            f"{q['median']:.1f} | {u['median']:.0f} |"
        )
    (run.RESULTS / "produce-cpu-latest.md").write_text("\n".join(lines) + "\n")
    run.log(f"results in {run.RESULTS / 'produce-cpu-latest.md'}")


if __name__ == "__main__":
    main()
