"""Throughput report: records and bytes in per topic and partition per hour, top topics, skew, peak hour.

    python -m jobs.throughput_report --bootstrap-servers 127.0.0.1:9092 [--since 24h] [--output DIR]

Counts come from the records themselves: a record belongs to the hour of its timestamp, and its size is key
length + value length (what a producer sent; batch and header overhead excluded). The window is the last
``--since`` up to the start of the run, so records whose timestamps are outside it are read but not counted.
"""

from __future__ import annotations

import argparse
import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from jobs.charts import bar_chart, line_chart
from jobs.report import Report, ReportContext, ReportResult, main

MS_PER_HOUR = 3_600_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topics", default=".*", metavar="REGEX", help="topics to include (default all but internal)"
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="how many top topics to list (default 10)"
    )


def record_size():
    """Key length + value length in bytes (a null key or value counts 0)."""
    return F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))


def hourly_counts(records, window_start_ms: int, window_end_ms: int):
    """records -> (topic, partition, hour, in_window, records, bytes); ``in_window`` tells counted rows."""
    start = F.timestamp_millis(F.lit(window_start_ms))
    end = F.timestamp_millis(F.lit(window_end_ms))
    return (
        records.select(
            "topic",
            "partition",
            F.date_trunc("hour", "timestamp").alias("hour"),
            ((F.col("timestamp") >= start) & (F.col("timestamp") < end)).alias("in_window"),
            record_size().alias("size"),
        )
        .groupBy("topic", "partition", "hour", "in_window")
        .agg(F.count(F.lit(1)).alias("records"), F.sum("size").alias("bytes"))
    )


def _utc(value: dt.datetime) -> dt.datetime:
    """Arrow hands Spark timestamps back in UTC, with or without the zone attached."""
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _hour_iso(value: dt.datetime) -> str:
    return _utc(value).isoformat().replace("+00:00", "Z")


def run(ctx: ReportContext) -> ReportResult:
    partitions = {
        t: len(ps)
        for t, ps in ctx.cluster_client().partitions(include_internal=False).items()
        if _matches(ctx.args.topics, t)
    }
    records = ctx.read(
        subscribePattern=ctx.args.topics,
        startingTimestamp=str(ctx.window_start_ms),
        startingOffsetsByTimestampStrategy="latest",
    )
    counted = hourly_counts(records, ctx.window_start_ms, ctx.window_end_ms).toArrow()
    rows_read = pc.sum(counted["records"]).as_py() or 0
    hourly = counted.filter(counted["in_window"]).drop_columns(["in_window"])
    hourly = hourly.sort_by([("topic", "ascending"), ("partition", "ascending"), ("hour", "ascending")])

    per_partition = hourly.group_by(["topic", "partition"]).aggregate([("records", "sum"), ("bytes", "sum")])
    per_partition = per_partition.rename_columns(["topic", "partition", "records", "bytes"])
    per_topic_hour = hourly.group_by(["topic", "hour"]).aggregate([("records", "sum"), ("bytes", "sum")])
    per_hour = hourly.group_by(["hour"]).aggregate([("records", "sum"), ("bytes", "sum")])

    topics: dict[str, dict] = {
        t: {"records": 0, "bytes": 0, "partitions": n, "skew": None, "peak_hour": None}
        for t, n in partitions.items()
    }
    part_bytes: dict[str, list[int]] = {}
    for row in per_partition.to_pylist():
        entry = topics.setdefault(
            row["topic"], {"records": 0, "bytes": 0, "partitions": 0, "skew": None, "peak_hour": None}
        )
        entry["records"] += row["records"]
        entry["bytes"] += row["bytes"]
        part_bytes.setdefault(row["topic"], []).append(row["bytes"])
    for topic, entry in topics.items():
        sizes = part_bytes.get(topic, [])
        n = max(entry["partitions"], len(sizes))
        if entry["bytes"]:
            # max partition over the mean partition: 1.0 is even, n means one partition took everything
            entry["skew"] = round(max(sizes) / (entry["bytes"] / n), 3)
    for row in per_topic_hour.to_pylist():
        entry = topics[row["topic"]]
        peak = entry["peak_hour"]
        if peak is None or row["bytes_sum"] > peak["bytes"]:
            entry["peak_hour"] = {
                "hour": _hour_iso(row["hour"]),
                "records": row["records_sum"],
                "bytes": row["bytes_sum"],
            }

    peak_hour = None
    for row in per_hour.to_pylist():
        if peak_hour is None or row["bytes_sum"] > peak_hour["bytes"]:
            peak_hour = {
                "hour": _hour_iso(row["hour"]),
                "records": row["records_sum"],
                "bytes": row["bytes_sum"],
            }
    ranked = sorted((t for t in topics if topics[t]["bytes"]), key=lambda t: (-topics[t]["bytes"], t))
    top = [
        {"topic": t, "records": topics[t]["records"], "bytes": topics[t]["bytes"]}
        for t in ranked[: ctx.args.top]
    ]

    topic_table = pa.Table.from_pylist(
        [
            {
                "topic": t,
                "partitions": e["partitions"],
                "records": e["records"],
                "bytes": e["bytes"],
                "skew": e["skew"],
                "peak_hour": (e["peak_hour"] or {}).get("hour"),
                "peak_hour_bytes": (e["peak_hour"] or {}).get("bytes"),
            }
            for t, e in sorted(topics.items())
        ],
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("partitions", pa.int32()),
                ("records", pa.int64()),
                ("bytes", pa.int64()),
                ("skew", pa.float64()),
                ("peak_hour", pa.string()),
                ("peak_hour_bytes", pa.int64()),
            ]
        ),
    )
    # every hour of the window on the x axis, so an hour without records shows as 0, not as a line across it
    first_hour = ctx.window_start_ms // MS_PER_HOUR * MS_PER_HOUR
    hours = [
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        for ms in range(first_hour, ctx.window_end_ms, MS_PER_HOUR)
    ]
    topic_hour_bytes = {(r["topic"], _utc(r["hour"])): r["bytes_sum"] for r in per_topic_hour.to_pylist()}
    series = {t: (hours, [topic_hour_bytes.get((t, h), 0) / 1e6 for h in hours]) for t in ranked[:5]}
    charts = {
        "bytes_per_hour": line_chart("Bytes in per hour (top topics)", series, "MB"),
        "top_topics": bar_chart(
            "Top topics by bytes in", [t["topic"] for t in top], [t["bytes"] / 1e6 for t in top], "MB"
        ),
    }
    summary = {
        "topics": topics,
        "top_topics": top,
        "peak_hour": peak_hour,
        "totals": {
            "records": sum(e["records"] for e in topics.values()),
            "bytes": sum(e["bytes"] for e in topics.values()),
        },
    }
    return ReportResult(
        summary=summary,
        tables={"hourly": hourly, "partitions": per_partition, "topics": topic_table},
        charts=charts,
        rows_read=rows_read,
    )


def _matches(pattern: str, topic: str) -> bool:
    import re

    return re.fullmatch(pattern, topic) is not None


REPORT = Report(
    name="throughput",
    description="Records and bytes in per topic and partition per hour, top topics, skew and peak hour.",
    run=run,
    add_arguments=add_arguments,
)

if __name__ == "__main__":
    main(REPORT)
