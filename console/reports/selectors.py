"""Reads about reports: runs of a cluster, the latest finished run of each report, a run's tables."""

from __future__ import annotations

from console.clusters.models import Cluster
from console.reports.models import REPORTS, ReportRun, Status

TABLE_ROWS = 50


def runs_of(cluster: Cluster, report: str | None = None):
    runs = ReportRun.objects.filter(cluster=cluster).select_related("created_by")
    return runs.filter(report=report) if report else runs


def latest_succeeded(cluster: Cluster, report: str) -> ReportRun | None:
    return runs_of(cluster, report).filter(status=Status.SUCCEEDED).first()


def latest_by_report(cluster: Cluster) -> dict[str, ReportRun | None]:
    return {report: latest_succeeded(cluster, report) for report in REPORTS}


def table_rows(run: ReportRun, table: str, limit: int = TABLE_ROWS) -> tuple[list[str], list[list]]:
    """The first rows of one of the run's Parquet tables (a file or a directory of parts)."""
    import pyarrow.parquet as pq

    relative = ((run.summary or {}).get("tables") or {}).get(table)
    if not relative or not run.output_dir:
        return [], []
    from pathlib import Path

    base = Path(run.output_dir).resolve()
    path = (base / relative).resolve()
    if base not in path.parents or not path.exists():
        return [], []
    data = pq.read_table(path).slice(0, limit)
    columns = data.column_names
    return columns, [list(row.values()) for row in data.to_pylist()]
