"""Retention and usage report: what the cluster stores, how old it is, what goes next, and the billing dimensions.

    python -m jobs.retention_report --bootstrap-servers 127.0.0.1:9092 [--since 24h] [--horizon 24h]

Per topic, partition and broker:
- bytes stored: the log size each broker reports (DescribeLogDirs); ``bytes_stored`` is one copy (the leader's
  replica), ``bytes_stored_all_replicas`` the disk used by every replica;
- the oldest record's timestamp and age against ``retention.ms``;
- what retention deletes next: records whose timestamps pass ``retention.ms`` within ``--horizon`` (and those
  already past it, waiting for their segment to be deleted). Kafka deletes whole segments, once the newest record
  of a segment is past retention, so these counts are an upper bound of what the next deletions remove;
- compaction savings (topics with ``cleanup.policy`` compact): the bytes of records that a later record with
  the same key supersedes, plus tombstones older than ``delete.retention.ms``: what the cleaner removes;
- partition-hours (partitions x the window's hours; a topic created within the window counts from the window's
  start) and GB-hours (the bytes stored, each record counted from its timestamp, or the window's start, to the
  end of the window; 1 GB = 10⁹ bytes): the billing dimensions of a managed Kafka service.
"""

from __future__ import annotations

import argparse
import re

import pyarrow as pa
from pyspark.sql import functions as F

from jobs.charts import bar_chart
from jobs.report import Report, ReportContext, ReportResult, main, parse_duration_ms
from jobs.throughput_report import MS_PER_HOUR, record_size

BYTES_PER_GB = 1e9


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topics", default=".*", metavar="REGEX", help="topics to include (default all but internal)"
    )
    parser.add_argument(
        "--horizon",
        type=parse_duration_ms,
        default=parse_duration_ms("24h"),
        metavar="DURATION",
        help="how far ahead 'deletes next' looks (default 24h)",
    )


def partition_usage(records, configs, now_ms: int, window_start_ms: int, horizon_ms: int):
    """records + per-topic configs -> one row per (topic, partition) with counts, ages and deletion estimates.

    ``configs`` has topic, retention_ms (-1 = forever, or no delete policy), compact, delete_retention_ms."""
    ts = F.col("ts")
    retention = F.col("retention_ms")
    timed = retention >= 0
    eligible_now = timed & (ts < F.lit(now_ms) - retention)
    eligible_soon = timed & ~eligible_now & (ts < F.lit(now_ms + horizon_ms) - retention)
    residence_ms = F.greatest(F.lit(0), F.lit(now_ms) - F.greatest(ts, F.lit(window_start_ms)))
    rows = records.select(
        "topic",
        "partition",
        "offset",
        "key",
        F.unix_millis("timestamp").alias("ts"),
        record_size().alias("size"),
        F.col("value").isNull().alias("tombstone"),
    ).join(F.broadcast(configs), "topic")
    usage = rows.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum("size").alias("payload_bytes"),
        F.min("ts").alias("oldest_timestamp_ms"),
        F.max("ts").alias("newest_timestamp_ms"),
        F.count_if(eligible_now).alias("eligible_now_records"),
        F.sum(F.when(eligible_now, F.col("size")).otherwise(0)).alias("eligible_now_bytes"),
        F.count_if(eligible_soon).alias("delete_next_records"),
        F.sum(F.when(eligible_soon, F.col("size")).otherwise(0)).alias("delete_next_bytes"),
        F.sum(F.col("size") * residence_ms).alias("payload_byte_ms"),
        F.sum(residence_ms).alias("record_ms"),
    )
    # compaction keeps the newest record per key; an old enough tombstone goes too
    latest = F.max_by(F.struct("size", "tombstone", "ts", "delete_retention_ms"), "offset")
    per_key = (
        rows.where(F.col("compact") & F.col("key").isNotNull())
        .groupBy("topic", "partition", "key")
        .agg(F.sum("size").alias("size"), latest.alias("latest"))
        .select(
            "topic",
            "partition",
            (
                F.col("size")
                - F.col("latest.size")
                + F.when(
                    F.col("latest.tombstone")
                    & (F.col("latest.ts") < F.lit(now_ms) - F.col("latest.delete_retention_ms")),
                    F.col("latest.size"),
                ).otherwise(0)
            ).alias("savings"),
        )
        .groupBy("topic", "partition")
        .agg(F.sum("savings").alias("compaction_savings_bytes"))
    )
    return usage.join(per_key, ["topic", "partition"], "left")


def _retention_ms(config: dict[str, str]) -> int:
    if "delete" not in config.get("cleanup.policy", "delete"):
        return -1  # a compact-only topic never deletes by time
    return int(config.get("retention.ms", "604800000"))


def run(ctx: ReportContext) -> ReportResult:
    cluster = ctx.cluster_client()
    pattern = re.compile(ctx.args.topics)
    metadata = {t: ps for t, ps in cluster.partitions(include_internal=False).items() if pattern.fullmatch(t)}
    configs = cluster.topic_configs(metadata)
    sizes = cluster.log_dir_sizes()
    now, start = ctx.window_end_ms, ctx.window_start_ms
    window_hours = (now - start) / MS_PER_HOUR

    config_rows = [
        {
            "topic": t,
            "retention_ms": _retention_ms(c),
            "compact": "compact" in c.get("cleanup.policy", "delete"),
            "delete_retention_ms": int(c.get("delete.retention.ms", "86400000")),
        }
        for t, c in configs.items()
    ]
    config_df = ctx.spark.createDataFrame(
        config_rows or [{"topic": "", "retention_ms": -1, "compact": False, "delete_retention_ms": 0}],
        "topic string, retention_ms long, compact boolean, delete_retention_ms long",
    )
    usage = {}
    if metadata:
        records = ctx.read(subscribePattern=ctx.args.topics, startingOffsets="earliest")
        table = partition_usage(records, config_df, now, start, ctx.args.horizon).toArrow()
        usage = {(r["topic"], r["partition"]): r for r in table.to_pylist()}

    partition_rows = []
    for topic, parts in metadata.items():
        for info in parts:
            u = usage.get((topic, info.partition), {})
            replica_sizes = {b: sizes.get((b, topic, info.partition)) for b in info.replicas}
            stored = replica_sizes.get(info.leader) or max(
                (s or 0 for s in replica_sizes.values()), default=0
            )
            payload, payload_byte_ms = u.get("payload_bytes") or 0, u.get("payload_byte_ms") or 0
            # the log's bytes, spread over its records as their payload bytes (by count when all are empty)
            if payload:
                byte_ms = stored * payload_byte_ms / payload
            else:
                byte_ms = stored * (u.get("record_ms") or 0) / max(1, u.get("records") or 0)
            partition_rows.append(
                {
                    "topic": topic,
                    "partition": info.partition,
                    "leader": info.leader,
                    "bytes_stored": stored,
                    "bytes_stored_all_replicas": sum(s or 0 for s in replica_sizes.values()),
                    "records": u.get("records") or 0,
                    "payload_bytes": payload,
                    "oldest_timestamp_ms": u.get("oldest_timestamp_ms"),
                    "newest_timestamp_ms": u.get("newest_timestamp_ms"),
                    "eligible_now_records": u.get("eligible_now_records") or 0,
                    "eligible_now_bytes": u.get("eligible_now_bytes") or 0,
                    "delete_next_records": u.get("delete_next_records") or 0,
                    "delete_next_bytes": u.get("delete_next_bytes") or 0,
                    "compaction_savings_bytes": u.get("compaction_savings_bytes"),
                    "partition_hours": window_hours,
                    "gb_hours": byte_ms / MS_PER_HOUR / BYTES_PER_GB,
                }
            )

    topics = {}
    for topic in metadata:
        rows = [r for r in partition_rows if r["topic"] == topic]
        oldest = min(
            (r["oldest_timestamp_ms"] for r in rows if r["oldest_timestamp_ms"] is not None), default=None
        )
        retention_ms = _retention_ms(configs.get(topic, {}))
        compact = "compact" in configs.get(topic, {}).get("cleanup.policy", "delete")
        topics[topic] = {
            "partitions": len(rows),
            "bytes_stored": sum(r["bytes_stored"] for r in rows),
            "bytes_stored_all_replicas": sum(r["bytes_stored_all_replicas"] for r in rows),
            "records": sum(r["records"] for r in rows),
            "payload_bytes": sum(r["payload_bytes"] for r in rows),
            "oldest_timestamp_ms": oldest,
            "oldest_age_ms": None if oldest is None else now - oldest,
            "cleanup_policy": configs.get(topic, {}).get("cleanup.policy", "delete"),
            "retention_ms": retention_ms,
            "oldest_age_vs_retention": (
                None if oldest is None or retention_ms <= 0 else round((now - oldest) / retention_ms, 4)
            ),
            "eligible_now": {
                "records": sum(r["eligible_now_records"] for r in rows),
                "bytes": sum(r["eligible_now_bytes"] for r in rows),
            },
            "delete_next": {
                "within_ms": ctx.args.horizon,
                "records": sum(r["delete_next_records"] for r in rows),
                "bytes": sum(r["delete_next_bytes"] for r in rows),
            },
            "compaction_savings_bytes": sum(r["compaction_savings_bytes"] or 0 for r in rows)
            if compact
            else None,
            "partition_hours": round(sum(r["partition_hours"] for r in rows), 6),
            "gb_hours": sum(r["gb_hours"] for r in rows),
        }
    brokers: dict[str, dict] = {}
    for (broker_id, topic, _), size in sorted(sizes.items()):
        entry = brokers.setdefault(str(broker_id), {"bytes_stored": 0, "bytes_stored_reported_topics": 0})
        entry["bytes_stored"] += size  # every replica on the broker, internal topics included
        if topic in metadata:
            entry["bytes_stored_reported_topics"] += size

    ranked = sorted(topics, key=lambda t: (-topics[t]["bytes_stored"], t))[:15]
    aged = sorted(
        (t for t in topics if topics[t]["oldest_age_vs_retention"] is not None),
        key=lambda t: -topics[t]["oldest_age_vs_retention"],
    )[:15]
    charts = {
        "bytes_by_topic": bar_chart(
            "Bytes stored by topic (one copy)",
            ranked,
            [topics[t]["bytes_stored"] / 1e6 for t in ranked],
            "MB",
        ),
        "oldest_age_vs_retention": bar_chart(
            "Oldest record's age as a share of retention.ms",
            aged,
            [100 * topics[t]["oldest_age_vs_retention"] for t in aged],
            "% of retention.ms",
        ),
    }
    topic_table = pa.Table.from_pylist(
        [
            {
                "topic": t,
                **{k: v for k, v in e.items() if not isinstance(v, dict)},
                "eligible_now_bytes": e["eligible_now"]["bytes"],
                "delete_next_records": e["delete_next"]["records"],
                "delete_next_bytes": e["delete_next"]["bytes"],
            }
            for t, e in topics.items()
        ]
    )
    broker_table = pa.Table.from_pylist(
        [{"broker": int(b), **e} for b, e in brokers.items()],
        schema=pa.schema(
            [
                ("broker", pa.int32()),
                ("bytes_stored", pa.int64()),
                ("bytes_stored_reported_topics", pa.int64()),
            ]
        ),
    )
    summary = {
        "topics": topics,
        "brokers": brokers,
        "totals": {
            "bytes_stored": sum(e["bytes_stored"] for e in topics.values()),
            "bytes_stored_all_replicas": sum(e["bytes_stored_all_replicas"] for e in topics.values()),
            "partition_hours": round(sum(e["partition_hours"] for e in topics.values()), 6),
            "gb_hours": sum(e["gb_hours"] for e in topics.values()),
        },
    }
    tables = {"topics": topic_table, "brokers": broker_table}
    if partition_rows:
        tables["partitions"] = pa.Table.from_pylist(partition_rows)
    return ReportResult(
        summary=summary,
        tables=tables,
        charts=charts,
        rows_read=sum(r["records"] for r in partition_rows),
    )


REPORT = Report(
    name="retention",
    description="Bytes stored per topic, partition and broker; oldest records against retention.ms; "
    "what retention deletes next; compaction savings; partition-hours and GB-hours.",
    run=run,
    add_arguments=add_arguments,
)

if __name__ == "__main__":
    main(REPORT)
