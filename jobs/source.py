"""The ``odradek`` Spark data source: Kafka topics as a DataFrame, read over the Kafka protocol.

Schema and options mirror Spark's own Kafka source (``spark.read.format("kafka")``), so a job written for one
runs on the other with the format name changed:

    spark.read.format("odradek").option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "orders").option("startingOffsets", "earliest").load()

Theory of operation. Planning runs on the driver: the topic-partitions come from Metadata (``subscribe``,
``subscribePattern`` or ``assign``), the offset bounds from one batched ListOffsets (earliest, latest or by
timestamp), and every topic-partition's ``[start, end)`` range becomes one Spark input partition, split when it
holds more than ``maxRecordsPerPartition`` records or when ``minPartitions`` asks for more. Each Spark task
reads its range with a confluent-kafka consumer (``assign`` at the start offset, no group membership, no
commits): librdkafka fetches, decompresses and decodes the record batches in C, and the task turns each
``consume()`` batch into one Arrow record batch column by column, which Spark takes without per-row
conversion. A range ends at its end offset or at the partition's end (compacted logs and transaction markers
leave gaps in offsets, so the last offset of a range may never arrive).

Streaming reads use the same ranges: offsets are ``{"topic": {"partition": next_offset}}`` (Spark's Kafka
JSON), ``maxOffsetsPerTrigger`` caps a micro-batch (shared between partitions in proportion to their backlog),
and partitions added to a topic are read from their start.
"""

from __future__ import annotations

import itertools
import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SOURCE_NAME = "odradek"

EARLIEST = -2  # Spark's Kafka JSON offsets: -2 is the earliest offset, -1 the latest
LATEST = -1

DEFAULT_MAX_RECORDS_PER_PARTITION = 2_000_000
DEFAULT_POLL_TIMEOUT_MS = 120_000
CONSUME_BATCH = 10_000  # records per consume() call, and so per Arrow batch

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), False), StructField("value", BinaryType(), True)]), False
)

_SOURCE_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "minpartitions",
    "maxrecordsperpartition",
    "maxoffsetspertrigger",
    "includeheaders",
    "failondataloss",
    "kafkaconsumer.polltimeoutms",
}


class SourceOptionError(ValueError):
    """An option of the data source is missing, unknown or malformed; the message names it."""


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("timestampType", IntegerType(), False),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)


# ------------------------------------------------------------------------------------------------------------
# options


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise SourceOptionError(f"{name}: expected true or false, got {raw!r}")
    return raw.strip().lower() == "true"


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SourceOptionError(f"{name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise SourceOptionError(f"{name}: must be at least {minimum}, got {value}")
    return value


def _offsets_json(name: str, raw: str) -> dict[str, dict[int, int]]:
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise ValueError
        return {str(topic): {int(p): int(o) for p, o in parts.items()} for topic, parts in parsed.items()}
    except (ValueError, TypeError, AttributeError):
        raise SourceOptionError(
            f'{name}: expected "earliest", "latest" or JSON like {{"topic":{{"0":23,"1":-2}}}}, got {raw!r}'
        ) from None


@dataclass(frozen=True)
class OffsetSpec:
    """A bound of a read, from the option ``option``: "earliest", "latest", per-partition offsets (with -2/-1),
    or timestamps in ms (one for every partition, or per partition)."""

    option: str
    kind: str  # "earliest" | "latest" | "offsets" | "timestamp"
    offsets: Mapping[str, Mapping[int, int]] | None = None  # offsets, or timestamps for kind "timestamp"
    timestamp_ms: int | None = None

    @classmethod
    def parse(cls, opts: Mapping[str, str], bound: str, default: str) -> OffsetSpec:
        """``bound`` is "starting" or "ending"; like Spark, ``<bound>Timestamp`` wins over
        ``<bound>OffsetsByTimestamp``, which wins over ``<bound>Offsets``."""
        name = f"{bound}Timestamp"
        if name.lower() in opts:
            return cls(name, "timestamp", timestamp_ms=_int(opts, name, None, minimum=0))
        name = f"{bound}OffsetsByTimestamp"
        if name.lower() in opts:
            timestamps = _offsets_json(name, opts[name.lower()])
            if any(ts < 0 for parts in timestamps.values() for ts in parts.values()):
                raise SourceOptionError(f"{name}: timestamps must be at least 0")
            return cls(name, "timestamp", offsets=timestamps)
        name = f"{bound}Offsets"
        text = opts.get(name.lower(), default).strip()
        if text.lower() in ("earliest", "latest"):
            if text.lower() == "earliest" and bound == "ending":
                raise SourceOptionError(f"{name}: 'earliest' is not allowed here")
            return cls(name, text.lower())
        offsets = _offsets_json(name, text)
        for topic, parts in offsets.items():
            for partition, offset in parts.items():
                if offset < EARLIEST or (offset == EARLIEST and bound == "ending"):
                    raise SourceOptionError(f"{name}: offset {offset} for {topic}-{partition} is not allowed")
        return cls(name, "offsets", offsets=offsets)


@dataclass(frozen=True)
class SourceOptions:
    kafka_config: dict[str, str]  # librdkafka configuration from the kafka.* options
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str  # "error" or "latest": what a starting timestamp past every record means
    min_partitions: int | None
    max_records_per_partition: int
    max_offsets_per_trigger: int | None
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items() if k.lower() not in ("path",)}
        unknown = sorted(k for k in opts if k not in _SOURCE_OPTIONS and not k.startswith("kafka."))
        if unknown:
            raise SourceOptionError(f"unknown option(s) {', '.join(unknown)} for the {SOURCE_NAME} source")
        kafka_config = {k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")}
        if not kafka_config.get("bootstrap.servers"):
            raise SourceOptionError("kafka.bootstrap.servers: required (HOST:PORT[,HOST:PORT...])")
        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
        if len(chosen) != 1:
            raise SourceOptionError("exactly one of subscribe, subscribePattern or assign is required")
        subscribe = pattern = assign = None
        if "subscribe" in chosen:
            subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        elif "subscribepattern" in chosen:
            pattern = opts["subscribepattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise SourceOptionError(f"subscribePattern: invalid regular expression: {exc}") from None
        else:
            try:
                raw = json.loads(opts["assign"])
                assign = {str(t): tuple(int(p) for p in ps) for t, ps in raw.items()}
            except (ValueError, TypeError, AttributeError):
                raise SourceOptionError(
                    f'assign: expected JSON like {{"topic":[0,1]}}, got {opts["assign"]!r}'
                )

        if streaming and any(k.startswith("ending") for k in opts):
            raise SourceOptionError(
                "endingOffsets, endingTimestamp and endingOffsetsByTimestamp are for batch queries"
            )
        starting = OffsetSpec.parse(opts, "starting", "latest" if streaming else "earliest")
        if starting.kind == "latest" and not streaming:
            raise SourceOptionError("startingOffsets: 'latest' is not allowed for a batch query")
        ending = OffsetSpec.parse(opts, "ending", "latest")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise SourceOptionError(
                f"startingOffsetsByTimestampStrategy: expected error or latest, got {strategy!r}"
            )
        return cls(
            kafka_config=kafka_config,
            subscribe=subscribe,
            subscribe_pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            timestamp_strategy=strategy,
            min_partitions=_int(opts, "minPartitions", None),
            max_records_per_partition=_int(opts, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION),
            max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", None),
            include_headers=_bool(opts, "includeHeaders", False),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS),
        )


# ------------------------------------------------------------------------------------------------------------
# planning (driver side)


class OffsetRange(InputPartition):
    """One Spark input partition: offsets ``[start, end)`` of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    @property
    def size(self) -> int:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def split_ranges(
    ranges: list[OffsetRange], max_records: int, min_partitions: int | None
) -> list[OffsetRange]:
    """Split ranges larger than ``max_records``, then the largest further until there are ``min_partitions``.

    Like Spark's KafkaOffsetRangeCalculator, the extra splits go to ranges in proportion to their size."""
    nonempty = [r for r in ranges if r.size > 0]
    pieces = {id(r): max(1, -(-r.size // max_records)) for r in nonempty}
    total = sum(r.size for r in nonempty)
    if min_partitions and total and sum(pieces.values()) < min_partitions:
        for r in nonempty:
            share = round(r.size / total * min_partitions)
            pieces[id(r)] = max(pieces[id(r)], min(r.size, share))
    out = []
    for r in nonempty:
        n = pieces[id(r)]
        bounds = [r.start + r.size * i // n for i in range(n + 1)]
        out.extend(OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds) if b > a)
    return out


class Planner:
    """Resolves topic-partitions and offset bounds against the cluster (driver side, never per record)."""

    def __init__(self, opts: SourceOptions) -> None:
        from jobs.cluster import ClusterClient

        self.opts = opts
        self.cluster = ClusterClient(opts.kafka_config)

    def topic_partitions(self) -> list[tuple[str, int]]:
        opts = self.opts
        if opts.assign is not None:
            known = self.cluster.partitions()
            missing = [
                f"{t}-{p}"
                for t, ps in opts.assign.items()
                for p in ps
                if p not in {i.partition for i in known.get(t, [])}
            ]
            if missing:
                raise SourceOptionError(f"assign: unknown topic-partitions {', '.join(missing)}")
            return sorted((t, p) for t, ps in opts.assign.items() for p in ps)
        if opts.subscribe is not None:
            known = self.cluster.partitions()
            missing = [t for t in opts.subscribe if t not in known]
            if missing:
                raise SourceOptionError(f"subscribe: unknown topic(s) {', '.join(missing)}")
            return [(t, info.partition) for t in opts.subscribe for info in known[t]]
        pattern = re.compile(opts.subscribe_pattern or "")
        known = self.cluster.partitions(include_internal=False)
        return [(t, info.partition) for t, infos in known.items() if pattern.fullmatch(t) for info in infos]

    def resolve(
        self, spec: OffsetSpec, tps: list[tuple[str, int]], *, earliest: dict, latest: dict
    ) -> dict[tuple[str, int], int]:
        """Concrete offsets for ``spec`` on every partition of ``tps``."""
        if spec.kind == "earliest":
            return {tp: earliest[tp] for tp in tps}
        if spec.kind == "latest":
            return {tp: latest[tp] for tp in tps}
        if spec.kind == "timestamp":
            wanted = (
                {tp: spec.timestamp_ms for tp in tps}
                if spec.offsets is None
                else self._per_partition(spec, tps)
            )
            found = self.cluster.offsets_for_timestamps(wanted)
            out = {}
            for tp in tps:
                if found[tp] >= 0:
                    out[tp] = found[tp]
                elif spec.option.startswith("starting") and self.opts.timestamp_strategy == "error":
                    raise SourceOptionError(
                        f"{spec.option}: {tp[0]}-{tp[1]} has no record at or after {wanted[tp]} "
                        "(set startingOffsetsByTimestampStrategy=latest to start at its end)"
                    )
                else:
                    out[tp] = latest[tp]
            return out
        given = self._per_partition(spec, tps)
        return {
            tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o for tp, o in given.items()
        }

    @staticmethod
    def _per_partition(spec: OffsetSpec, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        given = {(t, p): o for t, parts in (spec.offsets or {}).items() for p, o in parts.items()}
        if set(given) != set(tps):
            missing = sorted(set(tps) - set(given))
            extra = sorted(set(given) - set(tps))
            raise SourceOptionError(
                f"{spec.option}: must name every assigned partition"
                + (f"; missing {', '.join(f'{t}-{p}' for t, p in missing)}" if missing else "")
                + (f"; not assigned {', '.join(f'{t}-{p}' for t, p in extra)}" if extra else "")
            )
        return given

    def check_start(self, tp: tuple[str, int], start: int, earliest: int, latest: int) -> int:
        """A start before the log start (retention deleted it) is data loss: an error or, if allowed, skipped."""
        if earliest <= start <= latest:
            return start
        if self.opts.fail_on_data_loss:
            raise SourceOptionError(
                f"offset {start} of {tp[0]}-{tp[1]} is outside the log [{earliest}, {latest}]: records were "
                "deleted or the offset is wrong (set failOnDataLoss=false to read what is there)"
            )
        return min(max(start, earliest), latest)

    def batch_ranges(self) -> list[OffsetRange]:
        tps = self.topic_partitions()
        earliest, latest = self.cluster.earliest(tps), self.cluster.latest(tps)
        starts = self.resolve(self.opts.starting, tps, earliest=earliest, latest=latest)
        ends = self.resolve(self.opts.ending, tps, earliest=earliest, latest=latest)
        ranges = []
        for tp in tps:
            start = self.check_start(tp, starts[tp], earliest[tp], latest[tp])
            end = min(ends[tp], latest[tp])
            if end < start:
                raise SourceOptionError(
                    f"{tp[0]}-{tp[1]}: ending offset {end} is before starting offset {start}"
                )
            ranges.append(OffsetRange(tp[0], tp[1], start, end))
        return split_ranges(ranges, self.opts.max_records_per_partition, self.opts.min_partitions)


# ------------------------------------------------------------------------------------------------------------
# reading (executor side)


def _consumer_config(opts: SourceOptions) -> dict[str, object]:
    config: dict[str, object] = {
        "group.id": f"odradek-spark-{uuid.uuid4().hex}",  # required by librdkafka; never joined or committed
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        # records deleted under a range (retention, DeleteRecords) are an error, or skipped with failOnDataLoss=false
        "auto.offset.reset": "error" if opts.fail_on_data_loss else "earliest",
        "fetch.wait.max.ms": 100,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "fetch.max.bytes": 64 * 1024 * 1024,
        # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) whenever its local queue is
        # full; a reader that drains as fast as it can never needs that pause
        "fetch.queue.backoff.ms": 10,
    }
    config.update(opts.kafka_config)
    return config


def _arrow_schema(include_headers: bool):
    """The Arrow twin of ``source_schema`` (Spark checks nullability too)."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string(), False),
        pa.field("partition", pa.int32(), False),
        pa.field("offset", pa.int64(), False),
        pa.field("timestamp", pa.timestamp("us", "UTC"), False),
        pa.field("timestampType", pa.int32(), False),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string(), False), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header, False))))
    return pa.schema(fields)


def _arrow_batch(messages: list, schema):
    """One Arrow record batch from confluent-kafka messages of one partition, built column by column.

    librdkafka has decoded the record batches in C; what is left per record is fetching its fields, done with
    ``map`` over the C methods (no Python frame per record) straight into Arrow and numpy buffers."""
    import numpy as np
    import pyarrow as pa
    from confluent_kafka import Message

    n = len(messages)
    # (type, ms) pairs; librdkafka's types are 1 CreateTime and 2 LogAppendTime, Kafka's (and Spark's) 0 and 1
    pairs = itertools.chain.from_iterable(map(Message.timestamp, messages))
    timestamps = np.fromiter(pairs, dtype=np.int64, count=2 * n).reshape(n, 2)
    first = messages[0]
    columns = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(first.topic(), pa.string()), n),
        pa.array(np.full(n, first.partition(), dtype=np.int32)),
        pa.array(np.fromiter(map(Message.offset, messages), dtype=np.int64, count=n)),
        pa.array(timestamps[:, 1] * 1000, pa.timestamp("us", "UTC")),
        pa.array((timestamps[:, 0] - 1).astype(np.int32)),
    ]
    if len(schema) > len(columns):
        columns.append(pa.array([m.headers() or [] for m in messages], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(opts: SourceOptions, rng: OffsetRange) -> Iterator:
    """Arrow record batches of offsets ``[rng.start, rng.end)`` of one topic-partition."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

    if rng.size <= 0:
        return
    schema = _arrow_schema(opts.include_headers)
    consumer = Consumer(_consumer_config(opts))
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        position = rng.start
        last_progress = time.monotonic()
        while position < rng.end:
            messages = consumer.consume(num_messages=min(CONSUME_BATCH, rng.end - position), timeout=1.0)
            if not messages:
                if time.monotonic() - last_progress > opts.poll_timeout_ms / 1000:
                    raise TimeoutError(
                        f"no records from {rng.topic}-{rng.partition} at offset {position} within "
                        f"{opts.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)"
                    )
                continue
            last_progress = time.monotonic()
            reached_end = False
            if any(map(Message.error, messages)):
                good = []
                for m in messages:
                    err = m.error()
                    if err is None:
                        good.append(m)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        reached_end = True  # the log ends before rng.end: a compacted or aborted tail
                    else:
                        raise KafkaException(err)
                messages = good
            cut = len(messages)
            while cut and messages[cut - 1].offset() >= rng.end:
                cut -= 1
            if cut < len(messages):
                reached_end = True
            if cut:
                yield _arrow_batch(messages[:cut], schema)
                position = messages[cut - 1].offset() + 1
            if reached_end:
                return
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------------------------
# the Spark interfaces


class OdradekBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[OffsetRange]:
        return Planner(self.opts).batch_ranges()

    def read(self, partition: OffsetRange) -> Iterator:
        return read_range(self.opts, partition)


class OdradekStreamReader(DataSourceStreamReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner: Planner | None = None
        self._latest: dict | None = None

    def __getstate__(self) -> dict:
        # Spark ships the reader to its tasks; the admin client stays on the driver
        return {"opts": self.opts, "_planner": None, "_latest": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.opts)
        return self._planner

    def initialOffset(self) -> dict:
        tps = self.planner.topic_partitions()
        earliest, latest = self.planner.cluster.earliest(tps), self.planner.cluster.latest(tps)
        starts = self.planner.resolve(self.opts.starting, tps, earliest=earliest, latest=latest)
        return _offsets_dict(
            {tp: self.planner.check_start(tp, o, earliest[tp], latest[tp]) for tp, o in starts.items()}
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        tps = self.planner.topic_partitions()
        latest = self.planner.cluster.latest(tps)
        self._latest = _offsets_dict(latest)
        begin = _offsets_from_dict(start)
        new = [tp for tp in tps if tp not in begin]
        if new:  # partitions added since the query started are read from their start, as Spark's source does
            begin.update(self.planner.cluster.earliest(new))
        backlog = {tp: max(0, latest[tp] - begin[tp]) for tp in tps}
        total = sum(backlog.values())
        if isinstance(limit, ReadMaxRows) and total > limit.max_rows:
            shares = {tp: int(n * limit.max_rows / total) for tp, n in backlog.items()}
            # hand the rounding remainder to the largest backlogs so a trigger always moves when it may
            for tp in sorted(backlog, key=lambda tp: -backlog[tp])[: limit.max_rows - sum(shares.values())]:
                shares[tp] += 1
            return _offsets_dict({tp: begin[tp] + min(backlog[tp], shares[tp]) for tp in tps})
        return _offsets_dict({tp: max(begin[tp], latest[tp]) for tp in tps})

    def reportLatestOffset(self) -> dict | None:
        """The end offsets seen by the last ``latestOffset``: the query's progress shows how far behind it is."""
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        begin, finish = _offsets_from_dict(start), _offsets_from_dict(end)
        ranges = [OffsetRange(t, p, begin.get((t, p), 0), e) for (t, p), e in sorted(finish.items())]
        return split_ranges(ranges, self.opts.max_records_per_partition, self.opts.min_partitions)

    def read(self, partition: OffsetRange) -> Iterator:
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the source commits no offsets to the cluster; Spark's checkpoint holds them."""


def _offsets_dict(offsets: Mapping[tuple[str, int], int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def _offsets_from_dict(offsets: Mapping) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


class OdradekDataSource(DataSource):
    """``spark.read.format("odradek")`` and ``spark.readStream.format("odradek")``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return source_schema(_bool({k.lower(): v for k, v in self.options.items()}, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return OdradekBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OdradekStreamReader(SourceOptions.parse(self.options, streaming=True))
