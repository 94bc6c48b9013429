"""The throughput, lag and retention reports over the known data: numbers checked against what was produced,
and the run contract the console relies on (summary.json, tables, charts, exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from xml.etree import ElementTree

import pyarrow.parquet as pq
import pytest
from report_data import HOUR_MS

from jobs import lag_report, retention_report, throughput_report
from jobs.report import EXIT_CLUSTER, EXIT_OK, EXIT_USAGE, run_report

REPO = Path(__file__).resolve().parents[2]


def _run(report, tmp_path: Path, *args: str) -> dict:
    code = run_report(report.REPORT, [*args, "--output", str(tmp_path), "--master", "local[2]"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == EXIT_OK, summary.get("error")
    assert summary["status"] == "succeeded" and summary["error"] is None
    return summary


def _check_outputs(summary: dict, out: Path) -> None:
    for rel in summary["tables"].values():
        assert pq.read_table(out / rel) is not None
    for chart in summary["charts"].values():
        png = (out / chart["png"]).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
        assert ElementTree.parse(out / chart["svg"]).getroot().tag.endswith("svg")


def test_throughput_report_counts_what_was_produced(spark, broker, dataset, tmp_path, capsys):
    summary = _run(
        throughput_report,
        tmp_path,
        "--bootstrap-servers",
        dataset.bootstrap,
        "--since",
        "6h",
        "--topics",
        dataset.topic_pattern,
    )
    assert capsys.readouterr().out.strip().endswith(f"throughput report succeeded: {tmp_path.resolve()}")
    start = summary["parameters"]["window_start_ms"]
    counted = [r for recs in dataset.records.values() for r in recs if r.timestamp_ms >= start]
    assert len(counted) == sum(len(v) for v in dataset.records.values()) - 5  # orders' 10 h old records

    expected = defaultdict(lambda: {"records": 0, "bytes": 0})
    hourly = defaultdict(lambda: [0, 0])
    for r in counted:
        expected[r.topic]["records"] += 1
        expected[r.topic]["bytes"] += r.size
        cell = hourly[(r.topic, r.partition, r.timestamp_ms // HOUR_MS * HOUR_MS)]
        cell[0] += 1
        cell[1] += r.size
    topics = summary["topics"]
    assert {t: {"records": e["records"], "bytes": e["bytes"]} for t, e in topics.items()} == expected
    assert summary["totals"] == {"records": len(counted), "bytes": sum(r.size for r in counted)}
    assert summary["rows_read"] == len(counted)  # reading starts at the window's first offset

    orders = [r for r in counted if r.topic == dataset.orders]
    per_partition = [sum(r.size for r in orders if r.partition == p) for p in range(3)]
    assert topics[dataset.orders]["partitions"] == 3
    assert topics[dataset.orders]["skew"] == pytest.approx(
        max(per_partition) / (sum(per_partition) / 3), abs=1e-3
    )
    by_hour = defaultdict(int)
    for (topic, _, hour), (_, size) in hourly.items():
        if topic == dataset.orders:
            by_hour[hour] += size
    peak = max(by_hour, key=by_hour.get)
    assert topics[dataset.orders]["peak_hour"]["bytes"] == by_hour[peak]
    assert summary["top_topics"][0]["topic"] == dataset.orders

    table = pq.read_table(tmp_path / summary["tables"]["hourly"]).to_pylist()
    got = {
        (r["topic"], r["partition"], int(r["hour"].timestamp() * 1000)): [r["records"], r["bytes"]]
        for r in table
    }
    assert got == hourly
    _check_outputs(summary, tmp_path)


def test_retention_report(spark, broker, dataset, tmp_path):
    summary = _run(
        retention_report,
        tmp_path,
        "--bootstrap-servers",
        dataset.bootstrap,
        "--since",
        "6h",
        "--horizon",
        "2h",
        "--topics",
        dataset.topic_pattern,
    )
    topics = summary["topics"]
    now = summary["parameters"]["window_end_ms"]
    start = summary["parameters"]["window_start_ms"]
    for name, recs in dataset.records.items():
        entry = topics[name]
        assert entry["records"] == len(recs)
        assert entry["payload_bytes"] == sum(r.size for r in recs)
        assert entry["oldest_timestamp_ms"] == min(r.timestamp_ms for r in recs)
        assert entry["bytes_stored"] > entry["payload_bytes"]  # batch and record overhead on disk
        assert entry["partition_hours"] == pytest.approx(6.0 * entry["partitions"])
    assert topics[dataset.orders]["oldest_age_ms"] == now - (dataset.now_ms - 10 * HOUR_MS)

    audit = topics[dataset.audit]
    assert audit["retention_ms"] == 4 * HOUR_MS
    oldest_audit = dataset.now_ms - 3 * HOUR_MS
    assert audit["oldest_age_vs_retention"] == pytest.approx((now - oldest_audit) / (4 * HOUR_MS), abs=1e-4)
    assert audit["eligible_now"] == {"records": 0, "bytes": 0}
    assert audit["delete_next"] == {"within_ms": 2 * HOUR_MS, "records": 10, "bytes": 500}
    assert topics[dataset.orders]["delete_next"]["records"] == 0
    # GB-hours: the stored bytes, spread over the records by size, each from its timestamp to the window's end
    recs = dataset.records[dataset.audit]
    byte_ms = sum(r.size * (now - max(r.timestamp_ms, start)) for r in recs)
    assert audit["gb_hours"] == pytest.approx(
        audit["bytes_stored"] * byte_ms / audit["payload_bytes"] / HOUR_MS / 1e9
    )

    # compaction keeps the newest value per key; user-0's newest is a tombstone past delete.retention.ms
    profiles = dataset.records[dataset.profiles]
    newest = {}
    for r in profiles:
        newest[r.key] = r
    savings = sum(r.size for r in profiles if newest[r.key] is not r) + newest[b"user-0"].size
    assert topics[dataset.profiles]["cleanup_policy"] == "compact"
    assert topics[dataset.profiles]["compaction_savings_bytes"] == savings
    assert topics[dataset.orders]["compaction_savings_bytes"] is None

    stored = sum(t["bytes_stored"] for t in topics.values())
    assert summary["totals"]["bytes_stored"] == stored
    assert sum(b["bytes_stored_reported_topics"] for b in summary["brokers"].values()) == stored
    partitions = pq.read_table(tmp_path / summary["tables"]["partitions"]).to_pylist()
    assert (
        sum(p["bytes_stored"] for p in partitions if p["topic"] == dataset.orders)
        == topics[dataset.orders]["bytes_stored"]
    )
    _check_outputs(summary, tmp_path)


def test_lag_report_from_sampler_records(spark, broker, dataset, tmp_path):
    clusters = tmp_path / "clusters.json"
    clusters.write_text(json.dumps({"clusters": [{"name": "local", "bootstrap_servers": dataset.bootstrap}]}))
    out = tmp_path / "run"
    summary = _run(lag_report, out, "--cluster", "local", "--clusters-file", str(clusters), "--since", "1h")
    assert summary["parameters"]["cluster"] == "local"
    assert summary["parameters"]["bootstrap_servers"] == dataset.bootstrap
    groups = summary["groups"]
    assert set(groups) == {"fast", "slow", "stuck"}
    assert summary["never_caught_up"] == ["stuck"]
    assert groups["fast"]["max_lag"] == 0 and groups["fast"]["max_lag_seconds"] == 0
    slow = groups["slow"]
    # lag 50*i offsets; the committed offset was the log end offset i/2 rounds (15*i s) earlier
    assert (slow["max_lag"], slow["total_lag"], slow["max_lag_seconds"]) == (950, 950, 285.0)
    assert slow["seconds_above"] == {
        "60s": 14 * 30.0,
        "300s": 0.0,
        "900s": 0.0,
    }  # rounds 5..18 start above 60 s
    assert slow["rounds"] == 20 and not slow["never_caught_up"]
    stuck = groups["stuck"]
    # committed offset below the whole history: its lag in seconds is a lower bound (the history's first time)
    assert (stuck["max_lag"], stuck["max_lag_seconds"]) == (1 + 100 * 19, 19 * 30.0)
    assert stuck["seconds_above"] == {"60s": 16 * 30.0, "300s": 8 * 30.0, "900s": 0.0}
    assert summary["rows_read"] == len(dataset.samples)

    rows = pq.read_table(out / summary["tables"]["partition_lag"]).to_pylist()
    no_commit = [r for r in rows if r["group"] == "slow" and r["partition"] == 1]
    assert len(no_commit) == 20 and all(r["lag"] is None and r["lag_seconds"] is None for r in no_commit)
    _check_outputs(summary, out)


def test_lag_report_without_samples_topic_is_a_usage_error(spark, broker_factory, tmp_path):
    empty = broker_factory()
    code = run_report(lag_report.REPORT, ["--bootstrap-servers", empty.bootstrap, "--output", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == EXIT_USAGE
    assert summary["status"] == "failed" and "__odradek_lag_samples does not exist" in summary["error"]


def test_unreachable_cluster_exits_3(spark, tmp_path, helpers):
    port = helpers.free_port()
    code = run_report(
        throughput_report.REPORT,
        ["--bootstrap-servers", f"127.0.0.1:{port}", "--request-timeout", "2s", "--output", str(tmp_path)],
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == EXIT_CLUSTER
    assert summary["status"] == "failed" and f"127.0.0.1:{port}" in summary["error"]


def test_command_line_in_a_subprocess(tmp_path):
    """What the console does: run the module, read the exit code and summary.json (a run that reaches Spark
    is the same ``run_report`` as the tests above; this one stops before Spark starts)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ODRADEK_REPORTS_DIR": str(tmp_path / "reports")}
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.throughput_report",
            "--cluster",
            "nope",
            "--clusters-file",
            str(tmp_path / "none.json"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == EXIT_USAGE, bad.stderr
    assert "no clusters file" in bad.stderr
    runs = list((tmp_path / "reports" / "throughput").iterdir())
    assert len(runs) == 1 and json.loads((runs[0] / "summary.json").read_text())["status"] == "failed"
