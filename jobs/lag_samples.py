"""The lag-samples topic: what the lag sampler writes and the lag report reads (docs/contracts.md).

One record per (group, topic, partition) per sampling round, in the monitored cluster's own topic
``__odradek_lag_samples``. The record key is the group id (UTF-8), so one group's samples stay in order on one
partition; the value is a JSON object:

    {"version": 1, "cluster": "local", "group": "billing", "topic": "orders", "partition": 0,
     "timestamp_ms": 1795398330000, "committed_offset": 1200, "log_end_offset": 1500, "last_stable_offset": 1500}

``timestamp_ms`` is the round's time, the same for every sample of a round (the record's own timestamp is set to
it as well); ``committed_offset`` is null when the group has no committed offset for the partition. Offset lag
is ``log_end_offset - committed_offset`` (never below 0); the report derives lag in seconds from the log end
offsets' history. Readers ignore fields they do not know, and skip records whose ``version`` they do not know.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

LAG_SAMPLES_TOPIC = "__odradek_lag_samples"
FORMAT_VERSION = 1

#: Spark DDL of the value, for ``from_json``.
SAMPLE_SCHEMA_DDL = (
    "version int, cluster string, `group` string, topic string, `partition` int, timestamp_ms long, "
    "committed_offset long, log_end_offset long, last_stable_offset long"
)

#: Topic configs the sampler creates the topic with: a week of samples, deleted by time.
TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000)}


@dataclass(frozen=True)
class LagSample:
    cluster: str
    group: str
    topic: str
    partition: int
    timestamp_ms: int
    committed_offset: int | None
    log_end_offset: int
    last_stable_offset: int

    @property
    def lag(self) -> int | None:
        if self.committed_offset is None:
            return None
        return max(0, self.log_end_offset - self.committed_offset)

    def key(self) -> bytes:
        return self.group.encode()

    def value(self) -> bytes:
        return json.dumps({"version": FORMAT_VERSION, **asdict(self)}, separators=(",", ":")).encode()

    @classmethod
    def from_value(cls, value: bytes) -> LagSample | None:
        """The sample in a record value; None for a version this code does not know."""
        data = json.loads(value)
        if data.get("version") != FORMAT_VERSION:
            return None
        return cls(**{name: data.get(name) for name in cls.__dataclass_fields__})
