"""Running one report job in a subprocess (docs/contracts.md, "Report jobs"): a worker never holds a
SparkSession; the job's summary.json is the outcome, its exit code and output tail the fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from console.reports.models import ReportRun, Status

#: A report that has not finished after this long is killed and recorded as failed.
RUN_TIMEOUT_S = 3600
OUTPUT_TAIL_CHARS = 4000


def reports_dir() -> Path:
    return Path(os.environ.get("ODRADEK_REPORTS_DIR", settings.BASE_DIR / "var" / "reports"))


def command(run: ReportRun) -> list[str]:
    params = run.parameters or {}
    argv = [
        sys.executable,
        "-m",
        f"jobs.{run.report}_report",
        "--bootstrap-servers",
        run.cluster.bootstrap_servers,
        "--since",
        str(params.get("since", "24h")),
        "--output",
        run.output_dir,
    ]
    if params.get("topics") and run.report != "lag":  # the lag report reads groups, not topics
        argv += ["--topics", str(params["topics"])]
    return argv


def execute(run: ReportRun) -> ReportRun:
    run.output_dir = str(reports_dir() / run.cluster.name / run.report / f"run-{run.pk}")
    run.status, run.started_at = Status.RUNNING, timezone.now()
    run.save(update_fields=["output_dir", "status", "started_at"])
    started = time.monotonic()
    try:
        proc = subprocess.run(
            command(run),
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        returncode, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, output = None, f"timed out after {RUN_TIMEOUT_S}s\n{exc.stdout or ''}{exc.stderr or ''}"
    summary_path = Path(run.output_dir) / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    run.summary = summary
    run.duration_s = round(time.monotonic() - started, 3)
    run.finished_at = timezone.now()
    run.rows_read = (summary or {}).get("rows_read")
    if returncode == 0 and summary and summary.get("status") == "succeeded":
        run.status, run.error = Status.SUCCEEDED, ""
    else:
        first = (summary or {}).get("error") or f"the report exited with {returncode}"
        run.status = Status.FAILED
        run.error = f"{first}\n\n--- output (tail) ---\n{output[-OUTPUT_TAIL_CHARS:]}"
    run.save()
    return run
