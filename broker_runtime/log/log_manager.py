"""All partition logs of a broker, across its log dirs, and the log-dir files around them.

Per log dir: `meta.properties` (broker and cluster id), `.lock`, `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `replication-offset-checkpoint` (high watermarks), and `.kafka_cleanshutdown`, written
last by a clean shutdown and deleted once the logs are loaded: without it, every log is recovered from its
recovery point. Per partition dir: `partition.metadata` with the topic id.

Failures (Kafka's LogDirFailureChannel): an `OSError` on anything in a log dir takes the whole dir offline. Its
logs are closed without flushing, its partitions answer KAFKA_STORAGE_ERROR (`is_offline`), nothing is written
there again, and no clean-shutdown marker is written for it, so the next start recovers its logs. `on_dir_failure`
tells the broker, which keeps serving the other dirs or halts when none is left.

Slow disk work comes as `StorageJob`s, so that the broker can run it off the event loop: topic creation and
deletion of many partitions, checkpoints, fsyncs of rolled segments, retention's file deletions. The synchronous
methods (`create_log`, `checkpoint`, `run_flush`, ...) run the same jobs in place, for start-up and tests.
"""

from __future__ import annotations

import base64
import datetime
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.errors import KafkaError
from broker_runtime.log import checkpoint
from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import FileSystem, RealFileSystem, read_whole, write_atomically
from broker_runtime.log.partition_log import FlushPlan, PartitionLog
from broker_runtime.log.segment import LogSegment

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
PARTITION_METADATA = "partition.metadata"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"

Key = tuple[str, int]
T = TypeVar("T")


class LogDirError(Exception):
    """Log dirs cannot be used: one is locked by another process or its meta.properties disagrees with the
    config, or none is usable."""


def parse_partition_dir(name: str) -> Key | None:
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


@dataclass
class StorageJob(Generic[T]):
    """Disk work split so that its slow part can leave the event loop.

    `run` does only blocking I/O on files and objects that nothing else touches meanwhile, and may run on any
    thread; jobs of one log manager must run one at a time, in the order they were made (one worker thread).
    `finish(result)` runs on the owner's thread and publishes what `run` did. Calling the job does both in place."""

    run: Callable[[], T]
    finish: Callable[[T], Any]

    def __call__(self) -> Any:
        return self.finish(self.run())


@dataclass(frozen=True)
class NewLog:
    topic: str
    partition: int
    config: LogConfig
    topic_id: uuid.UUID
    # This broker leads: record where the epoch starts, as Kafka does on becoming leader.
    leader_epoch: int | None = None

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)


@dataclass
class _DirCheckpoints:
    """What one log dir's checkpoint files will say, captured on the owner's thread."""

    log_dir: Path
    log_starts: dict[Key, int]
    recovery_points: dict[Key, int] | None = None  # None: leave the file as it is
    high_watermarks: dict[Key, int] | None = None

    def write(self, fs: FileSystem) -> None:
        if self.recovery_points is not None:
            checkpoint.write_offsets(fs, self.log_dir / RECOVERY_POINT_CHECKPOINT, self.recovery_points)
        checkpoint.write_offsets(fs, self.log_dir / LOG_START_OFFSET_CHECKPOINT, self.log_starts)
        if self.high_watermarks is not None:
            checkpoint.write_offsets(fs, self.log_dir / REPLICATION_OFFSET_CHECKPOINT, self.high_watermarks)


@dataclass
class _Failures:
    """I/O errors met by a job's `run`, per log dir (the first one of each)."""

    errors: dict[Path, tuple[str, Exception]] = field(default_factory=dict)

    def add(self, log_dir: Path, what: str, error: Exception) -> None:
        self.errors.setdefault(log_dir, (what, error))

    def __contains__(self, log_dir: Path) -> bool:
        return log_dir in self.errors


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
        self._logs: dict[Key, PartitionLog] = {}
        self._log_dir_of: dict[Key, Path] = {}
        self._creating: dict[Key, Path] = {}  # logs a creation job is making
        self.topic_ids: dict[Key, uuid.UUID] = {}
        self._high_watermarks: dict[Key, int] = {}
        self._pending_deletes: list[tuple[Path, int]] = []  # (renamed dir, delete after wall ms)
        self._locks: dict[Path, int] = {}
        self.clean_shutdown_dirs: set[Path] = set()
        self.offline_dirs: set[Path] = set()
        self._offline_partitions: set[Key] = set()
        self.on_dir_failure: Callable[[Path, list[Key]], None] | None = None  # (dir, its partitions)
        # Logs a cleaner thread is compacting: retention leaves them to the next pass (the log cleaner's set).
        self.cleaning: set[Key] = set()

    # --- startup -----------------------------------------------------------------------------------------

    def startup(self, broker_id: int, cluster_id: str) -> None:
        """Lock every log dir, check meta.properties, load the logs. A dir that fails with an I/O error is
        offline from the start (as in Kafka); LogDirError when none is usable or the config is wrong."""
        for log_dir in self.log_dirs:
            try:
                self.fs.mkdir(log_dir)
                self._locks[log_dir] = self.fs.lock(log_dir / LOCK_FILE)
                self._check_meta_properties(log_dir, broker_id, cluster_id)
            except BlockingIOError:
                raise LogDirError(
                    f"{log_dir} is locked by another process (is another broker using it?)"
                ) from None
            except OSError as error:
                self.handle_dir_failure(log_dir, "opening the log dir", error)
        for log_dir in self.live_dirs:
            try:
                self._load_dir(log_dir)
            except OSError as error:
                self.handle_dir_failure(log_dir, "loading its logs", error)
            except KafkaError as error:  # a log failed while loading and took its dir offline
                log.error("%s: %s", log_dir, error.message)
        if not self.live_dirs:
            raise LogDirError(f"no usable log dir: {', '.join(map(str, self.log_dirs))} failed")

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

    def _read_checkpoint(self, path: Path) -> dict[Key, int]:
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
        now = self.clock.time_ms()
        for name in self.fs.listdir(log_dir):
            path = log_dir / name
            if not self.fs.is_dir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                # A deletion that did not finish before the last shutdown: finish it off the start-up path.
                self._pending_deletes.append((path, now))
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
            topic_id = self._read_topic_id(path / PARTITION_METADATA)
            if topic_id is not None:
                self.topic_ids[key] = topic_id
            if key in high_watermarks:
                self._high_watermarks[key] = high_watermarks[key]
        if clean:
            self.clean_shutdown_dirs.add(log_dir)
            self.fs.unlink(log_dir / CLEAN_SHUTDOWN_FILE)  # from now on a crash must be detected as unclean
        self._checkpoint_snapshot(log_dir).write(self.fs)

    def _read_topic_id(self, path: Path) -> uuid.UUID | None:
        """The topic id in partition.metadata; None when it is missing or damaged (it is written again)."""
        if not self.fs.exists(path):
            return None
        try:
            props = _read_properties(read_whole(self.fs, path).replace(b": ", b"="))
            return topic_id_from_str(props["topic_id"])
        except (KeyError, ValueError) as error:
            log.warning("%s is damaged (%r); it is written again when the partition is hosted", path, error)
            return None

    def _register(self, key: Key, log_dir: Path, partition_log: PartitionLog) -> None:
        self._logs[key] = partition_log
        self._log_dir_of[key] = log_dir
        partition_log.on_io_error = self._log_failed

    def _log_failed(self, partition_log: PartitionLog, error: OSError) -> None:
        log_dir = self._log_dir_of.get((partition_log.topic, partition_log.partition))
        if log_dir is not None:
            self.handle_dir_failure(log_dir, f"an operation on {partition_log.name}", error)

    # --- failures ------------------------------------------------------------------------------------------

    @property
    def live_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def is_offline(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._offline_partitions

    def handle_dir_failure(self, log_dir: Path, what: str, error: BaseException) -> None:
        """Take `log_dir` offline after an I/O error (Kafka's LogManager.handleLogDirFailure): close its logs
        without flushing, serve nothing from it, never write to it again, tell `on_dir_failure`."""
        if log_dir in self.offline_dirs:
            return
        self.offline_dirs.add(log_dir)
        keys = sorted(k for k, d in self._log_dir_of.items() if d == log_dir)
        log.error(
            "log dir %s failed (%s: %s): its %d partitions are offline until a restart recovers them; %s",
            log_dir, what, error, len(keys),
            f"still serving {', '.join(map(str, self.live_dirs))}" if self.live_dirs else "no log dir is left",
        )  # fmt: skip
        for key in keys:
            partition_log = self._logs.pop(key)
            del self._log_dir_of[key]
            self._offline_partitions.add(key)
            partition_log.failed = True
            partition_log.close_without_flush()
        self._pending_deletes = [(p, t) for p, t in self._pending_deletes if p.parent != log_dir]
        lock = self._locks.pop(log_dir, None)
        if lock is not None:
            try:
                self.fs.unlock(lock)
            except OSError:
                pass
        if self.on_dir_failure is not None:
            self.on_dir_failure(log_dir, keys)

    def _fail_dirs(self, failures: _Failures) -> None:
        for log_dir, (what, error) in failures.errors.items():
            self.handle_dir_failure(log_dir, what, error)

    # --- lookup and lifecycle of logs --------------------------------------------------------------------

    def logs(self) -> dict[Key, PartitionLog]:
        return dict(self._logs)

    def logs_with_dirs(self) -> dict[Key, tuple[PartitionLog, Path]]:
        return {key: (plog, self._log_dir_of[key]) for key, plog in self._logs.items()}

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def initial_high_watermarks(self) -> dict[Key, int]:
        """High watermarks read from replication-offset-checkpoint at startup (or last checkpointed)."""
        return dict(self._high_watermarks)

    def create_log(self, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID, *,
                   is_new: bool = True) -> PartitionLog:  # fmt: skip
        """Get or create one log, in place (see `create_logs`)."""
        created = self.create_logs([NewLog(topic, partition, config, topic_id)], is_new=is_new)()
        if (topic, partition) not in created:
            raise KafkaError(ErrorCode.kafka_storage_error, f"{topic}-{partition}: its log dir failed")
        return created[(topic, partition)]

    def create_logs(
        self, specs: Iterable[NewLog], *, is_new: bool = True
    ) -> StorageJob[dict[Key, PartitionLog]]:
        """Get or create logs; new ones go to the live log dir holding the fewest partitions. `finish` returns
        the logs by key; a log whose dir failed is missing from it (its partition is offline).

        `is_new=False` (a partition that should exist already) refuses to create a log while a log dir is
        offline, since the log may be in that dir (Kafka's rule). Raises KafkaError before any work when a log
        exists with another topic id, or KAFKA_STORAGE_ERROR when no log dir is left."""
        specs = list(specs)
        existing: dict[Key, PartitionLog] = {}
        new: list[tuple[NewLog, Path]] = []
        counts = {d: 0 for d in self.live_dirs}
        for d in [*self._log_dir_of.values(), *self._creating.values()]:
            if d in counts:
                counts[d] += 1
        for spec in specs:
            key = spec.key
            if key in self._offline_partitions:
                continue
            if not is_new and self.offline_dirs and key not in self._logs:
                self._offline_partitions.add(key)
                continue
            current = self._logs.get(key)
            if current is not None:
                known = self.topic_ids.get(key)
                if known is not None and known != spec.topic_id:
                    raise KafkaError(
                        ErrorCode.inconsistent_topic_id,
                        f"{spec.topic}-{spec.partition} has topic id {known} on disk, not {spec.topic_id}",
                    )
                existing[key] = current
                continue
            if key in self._creating:
                raise KafkaError(ErrorCode.invalid_request, f"{spec.topic}-{spec.partition} is being created")
            if not counts:
                raise KafkaError(ErrorCode.kafka_storage_error, "every log dir is offline")
            log_dir = min(counts, key=lambda d: counts[d])
            counts[log_dir] += 1
            self._creating[key] = log_dir
            new.append((spec, log_dir))
        metadata_missing = [
            (spec, existing[spec.key])
            for spec in specs
            if spec.key in existing and spec.key not in self.topic_ids
        ]

        def run() -> tuple[dict[Key, PartitionLog], _Failures]:
            opened: dict[Key, PartitionLog] = {}
            failures = _Failures()
            for spec, partition_log in metadata_missing:
                try:
                    self._write_partition_metadata(partition_log.dir, spec.topic_id)
                except OSError as error:
                    failures.add(partition_log.dir.parent, "writing partition.metadata", error)
            for spec, log_dir in new:
                if log_dir in failures:
                    continue
                path = log_dir / f"{spec.topic}-{spec.partition}"
                try:
                    partition_log = PartitionLog.open(
                        self.fs, path, spec.topic, spec.partition, spec.config, self.clock
                    )
                    opened[spec.key] = partition_log
                    # No fsync per partition (thousands would take minutes): these files of an empty log are
                    # written again (topic id) or rebuilt (epochs) if a power cut loses them; the metadata,
                    # saved first, still assigns the partition here.
                    self._write_partition_metadata(path, spec.topic_id, sync=False)
                    if spec.leader_epoch is not None:
                        partition_log.assign_epoch_start_offset(spec.leader_epoch, sync=False)
                except (OSError, KafkaError) as error:
                    failures.add(log_dir, f"creating the log of {spec.topic}-{spec.partition}", error)
            for log_dir in {d for _, d in new}:
                if log_dir not in failures:
                    try:
                        self.fs.fsync_dir(log_dir)  # the new partition dirs' entries
                    except OSError as error:
                        failures.add(log_dir, "syncing new partition dirs", error)
            return opened, failures

        def finish(outcome: tuple[dict[Key, PartitionLog], _Failures]) -> dict[Key, PartitionLog]:
            opened, failures = outcome
            for spec, log_dir in new:
                self._creating.pop(spec.key, None)
                partition_log = opened.get(spec.key)
                if log_dir in failures or log_dir in self.offline_dirs:
                    self._offline_partitions.add(spec.key)
                    if partition_log is not None:
                        partition_log.close_without_flush()
                    continue
                assert partition_log is not None
                self._register(spec.key, log_dir, partition_log)
                self.topic_ids[spec.key] = spec.topic_id
            for spec in specs:
                if spec.key in existing:
                    existing[spec.key].update_config(spec.config)
                    self.topic_ids.setdefault(spec.key, spec.topic_id)
            self._fail_dirs(failures)
            return {spec.key: self._logs[spec.key] for spec in specs if spec.key in self._logs}

        return StorageJob(run, finish)

    def _write_partition_metadata(self, path: Path, topic_id: uuid.UUID, *, sync: bool = True) -> None:
        text = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n"
        write_atomically(self.fs, path / PARTITION_METADATA, text.encode(), sync=sync)

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (t, _), partition_log in self._logs.items():
            if t == topic:
                partition_log.update_config(config)

    def delete_log(self, topic: str, partition: int) -> None:
        self.delete_logs([(topic, partition)])()

    def delete_logs(self, keys: Iterable[Key]) -> StorageJob[None]:
        """Forget the logs now; `run` renames each partition dir to `<topic>-<p>.<uuidhex>-delete` (Kafka's
        name), fsyncs each log dir once and rewrites its checkpoints once; the files go after
        file.delete.delay.ms (`remove_deleted_job`)."""
        doomed: list[tuple[PartitionLog, Path, Path]] = []
        for key in keys:
            self._offline_partitions.discard(key)
            partition_log = self._logs.pop(key, None)
            if partition_log is None:
                continue
            log_dir = self._log_dir_of.pop(key)
            self.topic_ids.pop(key, None)
            self._high_watermarks.pop(key, None)
            partition_log.closed = True  # nothing reaches it any more; its handles close in `run`
            renamed = log_dir / f"{key[0]}-{key[1]}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            doomed.append((partition_log, log_dir, renamed))
        touched = {log_dir for _, log_dir, _ in doomed}
        checkpoints = [self._checkpoint_snapshot(d) for d in touched]
        now = self.clock.time_ms()

        def run() -> _Failures:
            failures = _Failures()
            for partition_log, log_dir, renamed in doomed:
                partition_log.close_without_flush()
                if log_dir in failures:
                    continue
                try:
                    self.fs.rename(partition_log.dir, renamed)
                except OSError as error:
                    failures.add(log_dir, f"renaming {partition_log.dir} for deletion", error)
            self._write_checkpoints(checkpoints, failures, sync_dir=True)
            return failures

        def finish(failures: _Failures) -> None:
            for partition_log, log_dir, renamed in doomed:
                if log_dir not in failures and log_dir not in self.offline_dirs:
                    self._pending_deletes.append((renamed, now + partition_log.config.file_delete_delay_ms))
            self._fail_dirs(failures)

        return StorageJob(run, finish)

    def set_aside_stray_logs(self, keys: Iterable[Key]) -> None:
        """Rename logs nothing assigns here to `<topic>-<p>.<uuidhex>-stray` (Kafka's name), untouched, and stop
        serving them; never delete them (in place, at start-up)."""
        for key in keys:
            partition_log = self._logs.pop(key, None)
            if partition_log is None:  # its log dir failed meanwhile
                continue
            log_dir = self._log_dir_of.pop(key)
            self.topic_ids.pop(key, None)
            self._high_watermarks.pop(key, None)
            partition_log.close_without_flush()
            stray = log_dir / f"{key[0]}-{key[1]}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"
            try:
                self.fs.rename(partition_log.dir, stray)
                self.fs.fsync_dir(log_dir)
            except OSError as error:
                self.handle_dir_failure(log_dir, f"setting {partition_log.dir} aside", error)
                continue
            log.warning(
                "%s holds offsets %d-%d of %s-%d, which the cluster metadata does not assign to this broker: "
                "kept aside as %s (delete it once you know it is not needed)",
                partition_log.dir, partition_log.log_start_offset, partition_log.log_end_offset - 1, *key, stray,
            )  # fmt: skip

    def remove_deleted_job(self, now_ms: int) -> StorageJob[None]:
        """Remove the renamed dirs of deleted partitions whose file.delete.delay.ms has passed."""
        due = [p for p, t in self._pending_deletes if t <= now_ms]
        self._pending_deletes = [(p, t) for p, t in self._pending_deletes if t > now_ms]

        def run() -> None:
            for path in due:
                self.fs.rmtree(path)

        return StorageJob(run, lambda _: None)

    # --- checkpoints ---------------------------------------------------------------------------------------

    def _logs_in(self, log_dir: Path) -> dict[Key, PartitionLog]:
        return {k: v for k, v in self._logs.items() if self._log_dir_of[k] == log_dir}

    def _checkpoint_snapshot(self, log_dir: Path, *, log_starts_only: bool = False) -> _DirCheckpoints:
        logs = self._logs_in(log_dir)
        log_starts = {k: v.log_start_offset for k, v in logs.items()}
        if log_starts_only:
            return _DirCheckpoints(log_dir, log_starts)
        return _DirCheckpoints(
            log_dir, log_starts, {k: v.recovery_point for k, v in logs.items()},
            {k: hw for k, hw in self._high_watermarks.items() if k in logs},
        )  # fmt: skip

    def _write_checkpoints(self, checkpoints: list[_DirCheckpoints], failures: _Failures, *,
                           sync_dir: bool = False) -> None:  # fmt: skip
        for snapshot in checkpoints:
            if snapshot.log_dir in failures:
                continue
            try:
                if sync_dir:
                    self.fs.fsync_dir(snapshot.log_dir)
                snapshot.write(self.fs)
            except OSError as error:
                failures.add(snapshot.log_dir, "writing checkpoints", error)

    def checkpoint(self, high_watermarks: Mapping[Key, int]) -> None:
        self.checkpoint_job(high_watermarks)()

    def checkpoint_job(self, high_watermarks: Mapping[Key, int] | None = None) -> StorageJob[set[Path]]:
        """Rewrite the recovery point, log start offset and high watermark checkpoints of every live log dir,
        once each; `finish` returns the dirs that failed."""
        for key, hw in (high_watermarks or {}).items():
            if key in self._logs:
                self._high_watermarks[key] = hw
        return self._checkpoints_job([self._checkpoint_snapshot(d) for d in self.live_dirs])

    def log_start_checkpoint_job(self, keys: Iterable[Key]) -> StorageJob[set[Path]]:
        """Rewrite log-start-offset-checkpoint once in each log dir holding one of `keys` (DeleteRecords)."""
        dirs = {self._log_dir_of[k] for k in keys if k in self._log_dir_of}
        return self._checkpoints_job([self._checkpoint_snapshot(d, log_starts_only=True) for d in dirs])

    def _checkpoints_job(self, checkpoints: list[_DirCheckpoints]) -> StorageJob[set[Path]]:
        def run() -> _Failures:
            failures = _Failures()
            self._write_checkpoints(checkpoints, failures)
            return failures

        def finish(failures: _Failures) -> set[Path]:
            self._fail_dirs(failures)
            return set(failures.errors)

        return StorageJob(run, finish)

    # --- periodic work -----------------------------------------------------------------------------------

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget idle producer ids (producer.id.expiration.ms); returns how many."""
        return sum(plog.producer_state.remove_expired(now_ms, expiration_ms) for plog in self._logs.values())

    def run_retention(self, now_ms: int, high_watermarks: Mapping[Key, int] | None = None) -> int:
        deleted = self.retention_job(now_ms, high_watermarks)()
        self.remove_deleted_job(now_ms)()
        return deleted

    def retention_job(self, now_ms: int, high_watermarks: Mapping[Key, int] | None = None) -> StorageJob[int]:
        """Decide now which whole segments go (log start offset, retention.ms, retention.bytes; never above a
        partition's high watermark when `high_watermarks` has it); `run` deletes their files and rewrites the
        checkpoints of the dirs that changed. `finish` returns how many segments were deleted."""
        removed: list[tuple[Path, LogSegment]] = []
        for key, partition_log in list(self._logs.items()):
            if key in self.cleaning:
                continue
            hw = None if high_watermarks is None else high_watermarks.get(key)
            try:
                segments = partition_log.delete_old_segments(now_ms, hw)
            except KafkaError:
                continue  # its log dir failed and went offline
            removed.extend((self._log_dir_of[key], segment) for segment in segments)
        removed = [(d, segment) for d, segment in removed if d not in self.offline_dirs]
        checkpoints = [self._checkpoint_snapshot(d) for d in {d for d, _ in removed}]

        def run() -> _Failures:
            failures = _Failures()
            for log_dir, segment in removed:
                if log_dir in failures:
                    continue
                try:
                    segment.delete()
                except OSError as error:
                    failures.add(log_dir, f"deleting {segment.log_path}", error)
            self._write_checkpoints(checkpoints, failures)
            return failures

        def finish(failures: _Failures) -> int:
            self._fail_dirs(failures)
            return len(removed)

        return StorageJob(run, finish)

    def run_flush(self, now_ms: int) -> None:
        self.flush_job(now_ms)()

    def flush_job(self, now_ms: int) -> StorageJob[None]:
        """flush.ms for every log, and fsyncs of segments that rolled since the last flush (which moves recovery
        points forward); the fsyncs run in `run` while the logs keep appending."""
        plans: list[tuple[Path, FlushPlan]] = []
        for key, partition_log in self._logs.items():
            plan = partition_log.flush_due(now_ms)
            if plan is not None:
                plans.append((self._log_dir_of[key], plan))

        def run() -> _Failures:
            failures = _Failures()
            for log_dir, plan in plans:
                if log_dir in failures:
                    continue
                try:
                    plan.run()
                except OSError as error:
                    failures.add(log_dir, f"flushing {plan.log.name}", error)
            return failures

        def finish(failures: _Failures) -> None:
            for log_dir, plan in plans:
                if log_dir not in failures and not plan.log.failed:
                    plan.log.finish_flush(plan)
            self._fail_dirs(failures)

        return StorageJob(run, finish)

    def shutdown(self, high_watermarks: Mapping[Key, int]) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker of each live log dir.
        A dir that fails now gets no marker: its logs are recovered at the next start."""
        for partition_log in list(self._logs.values()):
            try:
                partition_log.close()
            except KafkaError:
                pass  # its dir went offline (logged); the others carry on
        self.checkpoint(high_watermarks)
        for log_dir in self.live_dirs:
            try:
                write_atomically(self.fs, log_dir / CLEAN_SHUTDOWN_FILE, b"")
            except OSError as error:
                self.handle_dir_failure(log_dir, "writing the clean-shutdown marker", error)
        for handle in self._locks.values():
            self.fs.unlock(handle)
        self._locks = {}

    def dir_sizes(self) -> dict[str, dict[Key, int]]:
        sizes: dict[str, dict[Key, int]] = {str(d): {} for d in self.live_dirs}
        for key, partition_log in self._logs.items():
            sizes[str(self._log_dir_of[key])][key] = partition_log.size_bytes()
        return sizes

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))
