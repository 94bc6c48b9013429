"""Consumer lag report: per group maximum and total lag, lag in seconds over time, time above alert
thresholds, and groups that never caught up, from the lag sampler's records (``jobs/lag_samples.py``).

    python -m jobs.lag_report --bootstrap-servers 127.0.0.1:9092 [--since 24h] [--thresholds 60s,5m,15m]

Lag in seconds follows kafka-lag-exporter: the log end offsets sampled over time are a history of when each
offset was written; a committed offset's time is interpolated between the last sample whose log end offset was
at or below it and the first one above it, and the lag is the sample's time minus that. A committed offset
older than the whole history gets the history's first time, so its lag is a lower bound.

A group's lag at a sampling round is the sum over its partitions (offsets) and the maximum (seconds). Time
above a threshold adds up the intervals between a group's rounds that start above it; an interval longer than
``--max-sample-gap`` (the sampler was down) counts only that long. A group never caught up when its lag was
above zero at every round of the window (at least two rounds).
"""

from __future__ import annotations

import argparse

import pyarrow as pa
from pyspark.sql import Window
from pyspark.sql import functions as F

from jobs.charts import bar_chart, line_chart
from jobs.lag_samples import FORMAT_VERSION, LAG_SAMPLES_TOPIC, SAMPLE_SCHEMA_DDL
from jobs.report import Report, ReportContext, ReportResult, UsageError, main, parse_duration_ms


def _durations(text: str) -> list[int]:
    return sorted({parse_duration_ms(part) for part in text.split(",") if part.strip()})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--thresholds",
        type=_durations,
        default=_durations("60s,5m,15m"),
        metavar="D1,D2,...",
        help="lag-seconds alert thresholds to measure time above (default 60s,5m,15m)",
    )
    parser.add_argument(
        "--max-sample-gap",
        type=parse_duration_ms,
        default=parse_duration_ms("2m"),
        metavar="DURATION",
        help="longest interval between rounds counted as lagging (default 2m, four default sampler intervals)",
    )
    parser.add_argument("--samples-topic", default=LAG_SAMPLES_TOPIC, help=f"default {LAG_SAMPLES_TOPIC}")


def parse_samples(records, window_start_ms: int, window_end_ms: int, cluster: str | None = None):
    """Sample records -> one row per (group, topic, partition, round), with offset lag."""
    s = records.select(F.from_json(F.col("value").cast("string"), SAMPLE_SCHEMA_DDL).alias("s")).select("s.*")
    s = s.where(
        (F.col("version") == FORMAT_VERSION)
        & F.col("group").isNotNull()
        & (F.col("timestamp_ms") >= window_start_ms)
        & (F.col("timestamp_ms") < window_end_ms)
    )
    if cluster:
        s = s.where(F.col("cluster") == cluster)
    s = s.dropDuplicates(["group", "topic", "partition", "timestamp_ms"])
    lag = F.when(F.col("committed_offset").isNull(), None).otherwise(
        F.greatest(F.lit(0), F.col("log_end_offset") - F.col("committed_offset"))
    )
    return s.withColumn("lag", lag)


def with_lag_seconds(samples):
    """Adds ``lag_seconds``: each committed offset's age, interpolated on the log end offsets' history.

    History points (time, log end offset) of a partition and the committed offsets to place are sorted
    together by offset; for each committed offset the last history point at or below it and the first above it
    are window functions over that order, so the work is a sort per partition, not a join of samples to
    history."""
    tp = ["topic", "partition"]
    history = samples.select(
        *tp, F.col("log_end_offset").alias("value"), F.col("timestamp_ms").alias("ts")
    ).distinct()
    behind = samples.where(F.col("lag") > 0)
    events = history.select(
        *tp, "value", "ts", F.lit(0).alias("kind"), F.lit(None).cast("string").alias("group")
    )
    events = events.unionByName(
        behind.select(
            *tp,
            F.col("committed_offset").alias("value"),
            F.col("timestamp_ms").alias("ts"),
            F.lit(1).alias("kind"),
            "group",
        )
    )
    order = Window.partitionBy(*tp).orderBy("value", "kind", "ts")
    before = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    after = order.rowsBetween(Window.currentRow, Window.unboundedFollowing)
    hist_value = F.when(F.col("kind") == 0, F.col("value"))
    hist_ts = F.when(F.col("kind") == 0, F.col("ts"))
    placed = events.select(
        "*",
        F.last(hist_value, ignorenulls=True).over(before).alias("lo_offset"),
        F.last(hist_ts, ignorenulls=True).over(before).alias("lo_ts"),
        F.first(hist_value, ignorenulls=True).over(after).alias("hi_offset"),
        F.first(hist_ts, ignorenulls=True).over(after).alias("hi_ts"),
    ).where(F.col("kind") == 1)
    written_at = F.when(F.col("lo_offset").isNull(), F.col("hi_ts")).otherwise(
        F.col("lo_ts")
        + (F.col("value") - F.col("lo_offset"))
        * (F.col("hi_ts") - F.col("lo_ts"))
        / (F.col("hi_offset") - F.col("lo_offset"))
    )
    seconds = placed.select(
        "group",
        *tp,
        F.col("ts").alias("timestamp_ms"),
        (F.greatest(F.lit(0.0), (F.col("ts") - written_at) / 1000.0)).alias("lag_seconds"),
    )
    joined = samples.join(seconds, ["group", *tp, "timestamp_ms"], "left")
    return joined.withColumn(
        "lag_seconds",
        F.when(F.col("lag").isNull(), None).when(F.col("lag") == 0, 0.0).otherwise(F.col("lag_seconds")),
    )


def group_rounds(partition_lag, max_gap_ms: int):
    """One row per (group, round): total and largest partition lag, largest lag in seconds, and the
    interval to the group's next round (capped at ``max_gap_ms``; 0 for the last round)."""
    rounds = partition_lag.groupBy("group", "timestamp_ms").agg(
        F.sum("lag").alias("total_lag"),
        F.max("lag").alias("max_partition_lag"),
        F.max("lag_seconds").alias("max_lag_seconds"),
        F.count(F.lit(1)).alias("partitions"),
    )
    nxt = F.lead("timestamp_ms").over(Window.partitionBy("group").orderBy("timestamp_ms"))
    # F.least skips nulls, so the last round (no next one) needs its own case
    return rounds.withColumn(
        "interval_ms",
        F.when(nxt.isNull(), 0).otherwise(F.least(nxt - F.col("timestamp_ms"), F.lit(max_gap_ms))),
    )


def group_stats(rounds, thresholds_ms: list[int]):
    aggs = [
        F.max("total_lag").alias("max_lag"),
        F.max_by("total_lag", "timestamp_ms").alias("total_lag"),
        F.max("max_partition_lag").alias("max_partition_lag"),
        F.max("max_lag_seconds").alias("max_lag_seconds"),
        F.max_by("max_lag_seconds", "timestamp_ms").alias("lag_seconds"),
        F.count(F.lit(1)).alias("rounds"),
        F.sum("partitions").alias("samples"),
        ((F.count(F.lit(1)) >= 2) & (F.min(F.coalesce("total_lag", F.lit(0))) > 0)).alias("never_caught_up"),
    ]
    for t in thresholds_ms:
        above = F.when(F.col("max_lag_seconds") > t / 1000, F.col("interval_ms")).otherwise(0)
        aggs.append((F.sum(above) / 1000.0).alias(f"seconds_above_{_label(t)}"))
    return rounds.groupBy("group").agg(*aggs).orderBy("group")


def run(ctx: ReportContext) -> ReportResult:
    args = ctx.args
    if args.samples_topic not in ctx.cluster_client().partitions():
        raise UsageError(
            f"no lag samples: topic {args.samples_topic} does not exist (is the lag sampler running?)"
        )
    records = ctx.read(
        subscribe=args.samples_topic,
        startingTimestamp=str(ctx.window_start_ms),
        startingOffsetsByTimestampStrategy="latest",
    )
    samples = parse_samples(records, ctx.window_start_ms, ctx.window_end_ms, ctx.cluster)
    partition_lag = with_lag_seconds(samples).cache()
    rounds = group_rounds(partition_lag, args.max_sample_gap).cache()
    stats = group_stats(rounds, args.thresholds).toArrow()
    groups = {}
    for row in stats.to_pylist():
        group = row.pop("group")
        above = {
            k.removeprefix("seconds_above_"): row.pop(k) for k in list(row) if k.startswith("seconds_above_")
        }
        groups[group] = {**row, "seconds_above": above}
    top = sorted(groups, key=lambda g: (-(groups[g]["max_lag_seconds"] or 0), g))[:5]
    over_time = (
        rounds.where(F.col("group").isin(top)).orderBy("group", "timestamp_ms").toArrow() if top else None
    )
    series = {}
    for g in top:
        rows = [r for r in over_time.to_pylist() if r["group"] == g]
        series[g] = (
            [_datetime(r["timestamp_ms"]) for r in rows],
            [r["max_lag_seconds"] or 0 for r in rows],
        )
    by_lag = sorted(groups, key=lambda g: (-(groups[g]["max_lag"] or 0), g))[:15]
    charts = {
        "lag_seconds_over_time": line_chart(
            "Lag in seconds (groups with the largest lag)",
            series,
            "seconds",
            hlines={f"threshold {_label(t)}": t / 1000 for t in args.thresholds},
        ),
        "max_lag_by_group": bar_chart(
            "Largest lag by group (offsets, summed over partitions)",
            by_lag,
            [groups[g]["max_lag"] or 0 for g in by_lag],
            "records",
        ),
    }
    tables = {  # the last two grow with groups x partitions x rounds: Spark writes them
        "groups": stats,
        "lag_over_time": rounds.orderBy("group", "timestamp_ms"),
        "partition_lag": partition_lag.select(
            "group",
            "topic",
            "partition",
            "timestamp_ms",
            "committed_offset",
            "log_end_offset",
            "last_stable_offset",
            "lag",
            "lag_seconds",
        ).orderBy("group", "topic", "partition", "timestamp_ms"),
    }
    summary = {
        "samples_topic": args.samples_topic,
        "thresholds_s": [t / 1000 for t in args.thresholds],
        "groups": groups,
        "never_caught_up": sorted(g for g, e in groups.items() if e["never_caught_up"]),
    }
    return ReportResult(
        summary=summary,
        tables=tables,
        charts=charts,
        rows_read=int(pa.compute.sum(stats["samples"]).as_py() or 0) if len(stats) else 0,
    )


def _label(threshold_ms: int) -> str:
    """A threshold as a name: 60s, 1.5s, 900s."""
    return f"{threshold_ms / 1000:g}s"


def _datetime(ms: int):
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


REPORT = Report(
    name="lag",
    description="Per group maximum and total lag, lag in seconds over time, time above alert thresholds, "
    "groups that never caught up; from the lag sampler's topic.",
    run=run,
    add_arguments=add_arguments,
)

if __name__ == "__main__":
    main(REPORT)
