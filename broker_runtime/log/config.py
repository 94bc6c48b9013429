"""Per-topic log settings, with Kafka's topic config names and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

_LONG_MAX = 2**63 - 1

# Kafka topic config name -> LogConfig field
TOPIC_CONFIG_FIELDS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "cleanup.policy": "cleanup_policy",
    "message.timestamp.type": "message_timestamp_type",
    "max.message.bytes": "max_message_bytes",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    flush_messages: int = _LONG_MAX
    flush_ms: int = _LONG_MAX
    file_delete_delay_ms: int = 60000
    cleanup_policy: str = "delete"
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5

    @classmethod
    def from_topic_config(cls, effective: Mapping[str, str]) -> LogConfig:
        """Build from effective topic configs (Kafka names); keys that are not log settings are ignored.

        Values are expected to be validated already (config.validate_topic_configs); a bad integer raises
        ValueError naming the key.
        """
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for key, name in TOPIC_CONFIG_FIELDS.items():
            raw = effective.get(key)
            if raw is None:
                continue
            if types[name] in (int, "int", float, "float"):
                number = float if types[name] in (float, "float") else int
                try:
                    values[name] = number(raw)
                except ValueError:
                    raise ValueError(f"{key}: expected a number, got {raw!r}") from None
            else:
                values[name] = str(raw)
        return cls(**values)  # type: ignore[arg-type]

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def deletes(self) -> bool:
        """Whether retention deletes segments (cleanup.policy contains 'delete')."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy contains 'compact')."""
        return "compact" in self.cleanup_policy.split(",")
