"""All partition logs of a broker, across its log dirs, and the log-dir files around them.

Per log dir: `meta.properties` (broker and cluster id), `.lock`, `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `replication-offset-checkpoint` (high watermarks), and `.kafka_cleanshutdown`, written
last by a clean shutdown and deleted once the logs are loaded: without it, every log is recovered from its
recovery point. Per partition dir: `partition.metadata` with the topic id.
"""

from __future__ import annotations

import base64
import datetime
import logging
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.errors import KafkaError
from broker_runtime.log import checkpoint
from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import FileSystem, RealFileSystem, read_whole, write_atomically
from broker_runtime.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
PARTITION_METADATA = "partition.metadata"
DELETE_DIR_SUFFIX = "-delete"


class LogDirError(Exception):
    """A log dir cannot be used (locked by another process, or meta.properties disagrees with the config)."""


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>` -> (topic, partition); None for anything else (deleted, future, stray dirs)."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or "." in partition:
        return None
    return topic, int(partition)


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _read_properties(data: bytes) -> dict[str, str]:
    props = {}
    for line in data.decode("utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    return props


class LogManager:
    def __init__(self, log_dirs: list[Path], clock: Clock, fs: FileSystem | None = None, *,
                 config_for_topic: Callable[[str], LogConfig] | None = None) -> None:  # fmt: skip
        """`config_for_topic` gives the effective LogConfig of a topic when logs are loaded at startup
        (defaults to LogConfig()); `create_log` and `update_config` pass configs explicitly."""
        if not log_dirs:
            raise LogDirError("log.dirs is empty")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.clock = clock
        self.fs: FileSystem = fs if fs is not None else RealFileSystem()
        self._config_for_topic = config_for_topic or (lambda topic: LogConfig())
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._log_dir_of: dict[tuple[str, int], Path] = {}
        self.topic_ids: dict[tuple[str, int], uuid.UUID] = {}
        self._high_watermarks: dict[tuple[str, int], int] = {}
        self._pending_deletes: list[tuple[Path, int]] = []  # (renamed dir, delete after wall ms)
        self._locks: list[int] = []
        self.clean_shutdown_dirs: set[Path] = set()

    # --- startup -----------------------------------------------------------------------------------------

    def startup(self, broker_id: int, cluster_id: str) -> None:
        for log_dir in self.log_dirs:
            self.fs.mkdir(log_dir)
            try:
                self._locks.append(self.fs.lock(log_dir / LOCK_FILE))
            except BlockingIOError:
                raise LogDirError(
                    f"{log_dir} is locked by another process (is another broker using it?)"
                ) from None
            self._check_meta_properties(log_dir, broker_id, cluster_id)
        for log_dir in self.log_dirs:
            self._load_dir(log_dir)

    def _check_meta_properties(self, log_dir: Path, broker_id: int, cluster_id: str) -> None:
        path = log_dir / META_PROPERTIES
        if self.fs.exists(path):
            props = _read_properties(read_whole(self.fs, path))
            if props.get("broker.id") not in (None, str(broker_id)):
                raise LogDirError(
                    f"{path}: broker.id={props['broker.id']} does not match the configured broker.id={broker_id}"
                )
            if props.get("cluster.id") not in (None, cluster_id):
                raise LogDirError(
                    f"{path}: cluster.id={props['cluster.id']} does not match the cluster's {cluster_id}"
                )
            return
        stamp = datetime.datetime.now(datetime.UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
        text = f"#\n#{stamp}\ncluster.id={cluster_id}\nversion=0\nbroker.id={broker_id}\n"
        write_atomically(self.fs, path, text.encode())

    def _read_checkpoint(self, path: Path) -> dict[tuple[str, int], int]:
        try:
            return checkpoint.read_offsets(self.fs, path)
        except checkpoint.CorruptCheckpointError as error:
            log.warning("%s; treating it as empty", error)
            return {}

    def _load_dir(self, log_dir: Path) -> None:
        clean = self.fs.exists(log_dir / CLEAN_SHUTDOWN_FILE)
        recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        high_watermarks = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
        for name in self.fs.listdir(log_dir):
            path = log_dir / name
            if not self.fs.is_dir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                self.fs.rmtree(path)  # a deletion that did not finish before the last shutdown
                continue
            key = parse_partition_dir(name)
            if key is None:
                continue
            if key in self._logs:
                raise LogDirError(f"{key[0]}-{key[1]} exists in both {self._log_dir_of[key]} and {log_dir}")
            partition_log = PartitionLog.open(
                self.fs, path, key[0], key[1], self._config_for_topic(key[0]), self.clock,
                recovery_point=recovery_points.get(key, 0), log_start_offset=log_starts.get(key, 0),
                clean_shutdown=clean and key in recovery_points,
            )  # fmt: skip
            self._register(key, log_dir, partition_log)
            metadata = path / PARTITION_METADATA
            if self.fs.exists(metadata):
                props = _read_properties(read_whole(self.fs, metadata).replace(b": ", b"="))
                if "topic_id" in props:
                    self.topic_ids[key] = topic_id_from_str(props["topic_id"])
            if key in high_watermarks:
                self._high_watermarks[key] = high_watermarks[key]
        if clean:
            self.clean_shutdown_dirs.add(log_dir)
            self.fs.unlink(log_dir / CLEAN_SHUTDOWN_FILE)  # from now on a crash must be detected as unclean
        self._checkpoint_dir(log_dir)

    def _register(self, key: tuple[str, int], log_dir: Path, partition_log: PartitionLog) -> None:
        self._logs[key] = partition_log
        self._log_dir_of[key] = log_dir
        partition_log.on_log_start_offset_change = self._log_start_changed

    def _log_start_changed(self, partition_log: PartitionLog) -> None:
        # DeleteRecords must survive a crash: persist the new log start offset right away.
        log_dir = self._log_dir_of.get((partition_log.topic, partition_log.partition))
        if log_dir is not None:
            self._write_log_starts(log_dir)

    # --- lookup and lifecycle of logs --------------------------------------------------------------------

    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        return dict(self._logs)

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def initial_high_watermarks(self) -> dict[tuple[str, int], int]:
        """High watermarks read from replication-offset-checkpoint at startup (or last checkpointed)."""
        return dict(self._high_watermarks)

    def create_log(self, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID) -> PartitionLog:
        """Get or create the log; the new one goes to the log dir holding the fewest partitions."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            known = self.topic_ids.get(key)
            if known is not None and known != topic_id:
                raise KafkaError(
                    ErrorCode.inconsistent_topic_id,
                    f"{topic}-{partition} has topic id {known} on disk, not {topic_id}",
                )
            if known is None:
                self._write_partition_metadata(existing.dir, topic_id)
                self.topic_ids[key] = topic_id
            existing.update_config(config)
            return existing
        counts = {d: 0 for d in self.log_dirs}
        for d in self._log_dir_of.values():
            counts[d] += 1
        log_dir = min(self.log_dirs, key=lambda d: counts[d])
        path = log_dir / f"{topic}-{partition}"
        partition_log = PartitionLog.open(self.fs, path, topic, partition, config, self.clock)
        self._write_partition_metadata(path, topic_id)
        self.topic_ids[key] = topic_id
        self._register(key, log_dir, partition_log)
        return partition_log

    def _write_partition_metadata(self, path: Path, topic_id: uuid.UUID) -> None:
        text = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n"
        write_atomically(self.fs, path / PARTITION_METADATA, text.encode())

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (t, _), partition_log in self._logs.items():
            if t == topic:
                partition_log.update_config(config)

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the partition dir to `<topic>-<p>.<uuidhex>-delete`; its files go after file.delete.delay.ms."""
        key = (topic, partition)
        partition_log = self._logs.pop(key, None)
        if partition_log is None:
            return
        log_dir = self._log_dir_of.pop(key)
        self.topic_ids.pop(key, None)
        self._high_watermarks.pop(key, None)
        partition_log.close_without_flush()
        doomed = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        self.fs.rename(partition_log.dir, doomed)
        self.fs.fsync_dir(log_dir)
        self._pending_deletes.append(
            (doomed, self.clock.time_ms() + partition_log.config.file_delete_delay_ms)
        )
        self._checkpoint_dir(log_dir)

    def _delete_pending(self, now_ms: int) -> None:
        due = [(p, t) for p, t in self._pending_deletes if t <= now_ms]
        for path, _ in due:
            self.fs.rmtree(path)
        self._pending_deletes = [(p, t) for p, t in self._pending_deletes if t > now_ms]

    # --- periodic work -----------------------------------------------------------------------------------

    def checkpoint(self, high_watermarks: Mapping[tuple[str, int], int]) -> None:
        """Write the recovery point, log start offset and high watermark checkpoints of every log dir."""
        for key, hw in high_watermarks.items():
            if key in self._logs:
                self._high_watermarks[key] = hw
        for log_dir in self.log_dirs:
            self._checkpoint_dir(log_dir)

    def _logs_in(self, log_dir: Path) -> dict[tuple[str, int], PartitionLog]:
        return {k: v for k, v in self._logs.items() if self._log_dir_of[k] == log_dir}

    def _checkpoint_dir(self, log_dir: Path) -> None:
        logs = self._logs_in(log_dir)
        checkpoint.write_offsets(
            self.fs, log_dir / RECOVERY_POINT_CHECKPOINT, {k: v.recovery_point for k, v in logs.items()}
        )
        self._write_log_starts(log_dir)
        checkpoint.write_offsets(
            self.fs,
            log_dir / REPLICATION_OFFSET_CHECKPOINT,
            {k: hw for k, hw in self._high_watermarks.items() if k in logs},
        )

    def _write_log_starts(self, log_dir: Path) -> None:
        logs = self._logs_in(log_dir)
        checkpoint.write_offsets(
            self.fs, log_dir / LOG_START_OFFSET_CHECKPOINT, {k: v.log_start_offset for k, v in logs.items()}
        )

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget idle producer ids (producer.id.expiration.ms); returns how many."""
        return sum(plog.producer_state.remove_expired(now_ms, expiration_ms) for plog in self._logs.values())

    def run_retention(self, now_ms: int, high_watermarks: Mapping[tuple[str, int], int] | None = None) -> int:
        """Delete whole segments by log start offset, retention.ms and retention.bytes; never above a
        partition's high watermark when `high_watermarks` has it. Also removes deleted partition dirs whose delay
        has passed. Returns the number of segments deleted."""
        deleted = 0
        touched: set[Path] = set()
        for key, partition_log in self._logs.items():
            hw = None if high_watermarks is None else high_watermarks.get(key)
            count = partition_log.delete_old_segments(now_ms, hw)
            if count:
                deleted += count
                touched.add(self._log_dir_of[key])
        for log_dir in touched:
            self._checkpoint_dir(log_dir)
        self._delete_pending(now_ms)
        return deleted

    def run_flush(self, now_ms: int) -> None:
        """flush.ms for every log, and fsync segments that rolled since (moves recovery points forward)."""
        for partition_log in self._logs.values():
            if not partition_log.maybe_flush(now_ms):
                partition_log.flush_rolled_segments()

    def shutdown(self, high_watermarks: Mapping[tuple[str, int], int]) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker of each log dir."""
        for partition_log in self._logs.values():
            partition_log.close()
        self.checkpoint(high_watermarks)
        for log_dir in self.log_dirs:
            write_atomically(self.fs, log_dir / CLEAN_SHUTDOWN_FILE, b"")
        for handle in self._locks:
            self.fs.unlock(handle)
        self._locks = []

    def dir_sizes(self) -> dict[str, dict[tuple[str, int], int]]:
        sizes: dict[str, dict[tuple[str, int], int]] = {str(d): {} for d in self.log_dirs}
        for key, partition_log in self._logs.items():
            sizes[str(self._log_dir_of[key])][key] = partition_log.size_bytes()
        return sizes

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))
