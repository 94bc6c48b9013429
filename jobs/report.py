"""What every report job shares: the command line, the run directory, summary.json, exit codes.

A report module defines a ``Report`` (name, extra arguments, and ``run(ctx) -> ReportResult``) and calls
``main(REPORT)``. ``docs/contracts.md`` ("Report jobs") is the contract the console relies on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1  # an unexpected error; the traceback is on stderr and in summary.json's "error"
EXIT_USAGE = 2  # bad arguments or options (argparse uses 2 as well)
EXIT_CLUSTER = 3  # the cluster could not be reached or answered with an error

DEFAULT_REPORTS_DIR = "var/reports"
DEFAULT_CLUSTERS_FILE = "var/clusters.json"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


class UsageError(Exception):
    """A bad argument: exit code 2 with this message."""


def parse_duration_ms(text: str) -> int:
    """``90s``, ``30m``, ``24h``, ``7d``, ``1w``, ``250ms``; a bare number is seconds."""
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (examples: 30m, 24h, 7d)")
    value = float(m.group(1)) * _UNIT_MS[m.group(2) or "s"]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive: {text!r}")
    return int(value)


def resolve_cluster(name: str, clusters_file: str | None) -> str:
    """The bootstrap servers of a registered cluster, from the clusters file (see docs/contracts.md)."""
    path = Path(clusters_file or os.environ.get("ODRADEK_CLUSTERS_FILE") or DEFAULT_CLUSTERS_FILE)
    try:
        data = json.loads(path.read_text())
        clusters = {c["name"]: c["bootstrap_servers"] for c in data["clusters"]}
    except FileNotFoundError:
        raise UsageError(f"--cluster {name}: no clusters file at {path} (use --bootstrap-servers)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--cluster {name}: {path} is not a valid clusters file: {exc!r}") from None
    if name not in clusters:
        known = ", ".join(sorted(clusters)) or "none"
        raise UsageError(f"--cluster {name}: not registered in {path} (known: {known})")
    return clusters[name]


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class ReportContext:
    """What a report's ``run`` gets: the session, where to read, the window, the arguments."""

    spark: Any  # pyspark.sql.SparkSession
    bootstrap_servers: str
    cluster: str | None
    window_start_ms: int
    window_end_ms: int
    args: argparse.Namespace

    def cluster_client(self) -> Any:
        from jobs.cluster import ClusterClient, client_config

        return ClusterClient(
            client_config(self.bootstrap_servers), timeout_s=self.args.request_timeout / 1000
        )

    def read(self, **options: str) -> Any:
        """A batch DataFrame of the ``odradek`` source on this cluster with the given options."""
        reader = self.spark.read.format("odradek").option("kafka.bootstrap.servers", self.bootstrap_servers)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()


@dataclass
class ReportResult:
    """What a report's ``run`` returns: the summary's report-specific keys, Arrow tables and charts.

    ``charts`` maps a chart name to a function drawing on a matplotlib Figure."""

    summary: dict[str, Any]
    tables: dict[str, Any] = field(default_factory=dict)  # name -> pyarrow.Table, or a Spark DataFrame
    charts: dict[str, Callable[[Any], None]] = field(default_factory=dict)
    rows_read: int = 0


@dataclass(frozen=True)
class Report:
    name: str
    description: str
    run: Callable[[ReportContext], ReportResult]
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None


def build_parser(report: Report) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m jobs.{report.name}_report", description=report.description
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--bootstrap-servers", metavar="HOST:PORT[,HOST:PORT]", help="the cluster to report on"
    )
    where.add_argument("--cluster", metavar="NAME", help="a cluster registered in the clusters file")
    parser.add_argument(
        "--clusters-file",
        metavar="FILE",
        help=f"registered clusters (default $ODRADEK_CLUSTERS_FILE or {DEFAULT_CLUSTERS_FILE})",
    )
    parser.add_argument(
        "--since",
        type=parse_duration_ms,
        default=parse_duration_ms("24h"),
        metavar="DURATION",
        help="report window, ending now (default 24h; e.g. 90m, 7d)",
    )
    parser.add_argument(
        "--output",
        metavar="DIR",
        help=f"run directory (default $ODRADEK_REPORTS_DIR or {DEFAULT_REPORTS_DIR}, then <report>/<UTC time>)",
    )
    parser.add_argument("--master", help="Spark master (default $SPARK_MASTER or local[*])")
    parser.add_argument(
        "--request-timeout",
        type=parse_duration_ms,
        default=parse_duration_ms("30s"),
        metavar="DURATION",
        help="how long to wait for the cluster's answers (default 30s)",
    )
    report.add_arguments(parser)
    return parser


def _default_output(report: str) -> Path:
    root = Path(os.environ.get("ODRADEK_REPORTS_DIR") or DEFAULT_REPORTS_DIR)
    return root / report / dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def _write_outputs(result: ReportResult, out: Path) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    import pyarrow.parquet as pq

    from jobs.charts import render

    tables = {}
    if result.tables:
        (out / "tables").mkdir(exist_ok=True)
    for name, table in result.tables.items():
        rel = f"tables/{name}.parquet"
        if hasattr(table, "write"):  # a Spark DataFrame too large to collect: a directory of part files
            table.write.mode("overwrite").parquet(str((out / rel).resolve()))
        else:
            pq.write_table(table, out / rel)
        tables[name] = rel
    charts = {}
    if result.charts:
        (out / "charts").mkdir(exist_ok=True)
    for name, draw in result.charts.items():
        charts[name] = {fmt: f"charts/{name}.{fmt}" for fmt in ("png", "svg")}
        render(draw, out / "charts" / name)
    return tables, charts


def run_report(report: Report, argv: Sequence[str] | None = None) -> int:
    """Run one report from the command line; returns the process exit code (see the EXIT_* constants)."""
    parser = build_parser(report)
    args = parser.parse_args(argv)  # exits 2 with argparse's message on bad usage
    started = time.time()
    out = Path(args.output) if args.output else _default_output(report.name)
    summary: dict[str, Any] = {
        "report": report.name,
        "status": "running",
        "error": None,
        "started_at": _iso(int(started * 1000)),
    }
    code = EXIT_OK
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot create the output directory {out}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        bootstrap = args.bootstrap_servers or resolve_cluster(args.cluster, args.clusters_file)
        window_end = int(started * 1000)
        window_start = window_end - args.since
        summary["parameters"] = {
            "bootstrap_servers": bootstrap,
            "cluster": args.cluster,
            "since_ms": args.since,
            "window_start": _iso(window_start),
            "window_end": _iso(window_end),
            "window_start_ms": window_start,
            "window_end_ms": window_end,
            **{k: v for k, v in vars(args).items() if k not in _COMMON_ARGS},
        }
        from jobs.spark import spark_session

        spark = spark_session(f"odradek-{report.name}-report", master=args.master)
        ctx = ReportContext(spark, bootstrap, args.cluster, window_start, window_end, args)
        result = report.run(ctx)
        tables, charts = _write_outputs(result, out)
        summary.update(result.summary)
        summary.update(status="succeeded", rows_read=result.rows_read, tables=tables, charts=charts)
    except UsageError as exc:
        code, summary["error"] = EXIT_USAGE, str(exc)
    except Exception as exc:
        code = _exit_code_for(exc)
        summary["error"] = _short_error(exc)
        traceback.print_exc()
    if code != EXIT_OK:
        summary["status"] = "failed"
        print(f"error: {summary['error']}", file=sys.stderr)
    finished = time.time()
    summary.update(finished_at=_iso(int(finished * 1000)), duration_s=round(finished - started, 3))
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(out / "summary.json")  # readers never see a half-written summary
    print(f"{report.name} report {summary['status']}: {out.resolve()}")
    return code


_COMMON_ARGS = {
    "bootstrap_servers",
    "cluster",
    "clusters_file",
    "since",
    "output",
    "master",
    "request_timeout",
}


def _short_error(exc: BaseException) -> str:
    """The error's first lines: Spark's messages go on with whole query plans and worker tracebacks."""
    text = f"{type(exc).__name__}: {exc}"
    for marker in ("SourceOptionError: ", "ClusterError: ", "KafkaException: ", "TimeoutError: "):
        if marker in text and not text.startswith(marker):
            text = text[text.rindex(marker) :]  # the cause raised in a Python worker, not Spark's wrapping
    lines = text.strip().splitlines()
    return "\n".join(lines[:3])[:1000]


def _exit_code_for(exc: BaseException) -> int:
    from confluent_kafka import KafkaException

    from jobs.cluster import ClusterError
    from jobs.source import SourceOptionError

    seen: BaseException | None = exc
    while seen is not None:
        # errors raised in Spark's Python planner and workers reach the driver as text
        text = str(seen)
        if isinstance(seen, SourceOptionError) or "SourceOptionError" in text:
            return EXIT_USAGE
        if (
            isinstance(seen, ClusterError | KafkaException)
            or "KafkaException" in text
            or "ClusterError" in text
        ):
            return EXIT_CLUSTER
        seen = seen.__cause__
    return EXIT_FAILED


def main(report: Report) -> None:
    sys.exit(run_report(report))
