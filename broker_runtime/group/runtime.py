"""The asyncio side of group coordination: shards per `__consumer_offsets` partition, their loads, appends and timers.

Theory of operation
-------------------
- **Leadership.** The runtime listens to `ReplicaManager` leadership events. When this broker becomes leader of a
  `__consumer_offsets` partition it creates a `GroupCoordinatorShard` and loads it: reads the partition from its
  log start up to its high watermark in `offsets.load.buffer.size` chunks, replays those records, waits until the
  high watermark reaches the log end (a new leader's last records are committed once its followers have them),
  and only then serves the partition's groups (COORDINATOR_LOAD_IN_PROGRESS meanwhile). Losing leadership unloads
  the shard: everything parked in it is answered NOT_COORDINATOR and clients look the coordinator up again.
- **Requests.** `call()` runs one synchronous shard handler, hands the appends it queued to the shard's writer
  and waits for the handler's `Reply` (a JoinGroup may wait for a whole rebalance).
- **Appends.** One writer task per shard appends queued record sets in order, several at a time as one batch,
  with acks=-1 and `offsets.commit.timeout.ms`; after each append it replays the records into the shard at their
  offsets and runs the continuations, which complete replies (OffsetCommit, the leader's SyncGroup, ...). An
  append that failed after reaching the log (the ISR did not acknowledge in time) may still be committed: the
  shard is reloaded, so its state is always that of the log at its high watermark.
- **Timers.** One task sleeps until the earliest shard deadline (sessions, join and sync phases, offset expiry)
  and polls the due shards; every shard call wakes it so that a new, earlier deadline is seen at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.group.api import Reply, TopicPartition
from broker_runtime.group.coordinator import Append, GroupCoordinatorConfig, GroupCoordinatorShard
from broker_runtime.group.records import OFFSETS_TOPIC, partition_for
from broker_runtime.protocol.compression import CODEC_NONE
from broker_runtime.protocol.records import (
    CONTROL_COMMIT,
    HEADER_SIZE,
    InvalidRecords,
    build_batch,
    decode_records,
    iter_headers,
    read_header,
)
from broker_runtime.protocol.varint import read_varint

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

log = logging.getLogger(__name__)

T = TypeVar("T")

# Records per appended batch when several operations are waiting: bounds batch size, keeps latency low.
MAX_RECORDS_PER_APPEND = 2000
# Merged batches stay well under the default max.message.bytes (1048588) of __consumer_offsets.
MAX_MERGED_BATCH_BYTES = 512 * 1024


# Append errors raised after the records reached this leader's log (waiting for the ISR): they may still commit.
MAYBE_WRITTEN = frozenset({ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append})


def _estimated_size(append: Append) -> int:
    """Uncompressed bytes the append adds to a batch (record framing included, roughly)."""
    return sum(len(key) + len(value or b"") + 16 for key, value in append.records)


class ShardStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADED = "unloaded"


@dataclass(eq=False)
class ShardHandle:
    partition: int
    leader_epoch: int
    shard: GroupCoordinatorShard
    status: ShardStatus = ShardStatus.LOADING
    queue: asyncio.Queue[Append] = field(default_factory=asyncio.Queue)
    tasks: list[asyncio.Task] = field(default_factory=list)


class GroupCoordinatorRuntime:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.clock = broker.clock
        self.config = GroupCoordinatorConfig.from_broker_config(broker.config)
        self._shards: dict[int, ShardHandle] = {}
        self._wakeup = asyncio.Event()
        self._timer_task: asyncio.Task | None = None
        self._offsets_topic_creation: asyncio.Task | None = None
        self._active = False

    # --- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._active = True
        loop = asyncio.get_running_loop()
        self._timer_task = loop.create_task(self._drive_timers(), name="group-timers")
        self.broker.replica_manager.add_leadership_listener(self._on_leadership)

    async def stop(self) -> None:
        self._active = False
        for index in list(self._shards):
            self._unload(index)
        if self._timer_task is not None:
            self._timer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer_task

    @property
    def num_partitions(self) -> int:
        """Partitions of `__consumer_offsets` as it exists, else as it would be created."""
        topic = self.broker.metadata.topics().get(OFFSETS_TOPIC)
        return (
            len(topic.partitions) if topic is not None else self.broker.config["offsets.topic.num.partitions"]
        )

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def is_loading(self) -> bool:
        return any(h.status is ShardStatus.LOADING for h in self._shards.values())

    def active_shards(self) -> list[GroupCoordinatorShard]:
        return [h.shard for h in self._shards.values() if h.status is ShardStatus.ACTIVE]

    def on_partitions_deleted(self, partitions: list[tuple[str, int]]) -> None:
        """Topics were deleted: every active shard tombstones the committed offsets of their partitions."""
        deleted = [TopicPartition(topic, index) for topic, index in partitions]
        for handle in list(self._shards.values()):
            if handle.status is ShardStatus.ACTIVE:
                handle.shard.on_partitions_deleted(deleted)
                self._after_call(handle)

    # --- leadership, load, unload ---------------------------------------------------------------------------

    def _on_leadership(self, topic: str, index: int, is_leader: bool, leader_epoch: int) -> None:
        if topic != OFFSETS_TOPIC or not self._active:
            return
        handle = self._shards.get(index)
        if handle is not None and is_leader:
            # Still the leader, at a newer epoch (an ISR or replica change): the shard stays, as Kafka's
            # coordinator skips a partition it already owns or is loading.
            handle.leader_epoch = leader_epoch
            return
        if handle is not None:
            self._unload(index)
        if is_leader:
            shard = GroupCoordinatorShard(index, self.config, self.clock)
            handle = ShardHandle(index, leader_epoch, shard)
            self._shards[index] = handle
            loop = asyncio.get_running_loop()
            handle.tasks.append(loop.create_task(self._load(handle), name=f"group-load-{index}"))

    def _unload(self, index: int) -> None:
        handle = self._shards.pop(index, None)
        if handle is None:
            return
        was_active = handle.status is ShardStatus.ACTIVE
        handle.status = ShardStatus.UNLOADED
        for task in handle.tasks:
            task.cancel()
        if was_active:
            handle.shard.unload()
        # Appends that were queued but not written never happened: tell their continuations.
        while not handle.queue.empty():
            append = handle.queue.get_nowait()
            if append.on_done is not None:
                append.on_done(ErrorCode.not_coordinator)
        log.info("unloaded group coordinator for %s-%d", OFFSETS_TOPIC, index)

    async def _load(self, handle: ShardHandle) -> None:
        start = self.clock.monotonic_ms()
        partition = self.broker.replica_manager.get_partition(OFFSETS_TOPIC, handle.partition)
        if partition is None:
            log.error("cannot load %s-%d: this broker does not host it", OFFSETS_TOPIC, handle.partition)
            return
        plog = partition.log
        chunk = self.broker.config["offsets.load.buffer.size"]
        offset = plog.log_start_offset
        records = batches = 0
        shard = handle.shard
        try:
            while True:
                # Only records at or below the high watermark are replayed: one past it may still be lost with
                # this leader. Records this leader has past its high watermark become committed (or the
                # leadership moves and this task is cancelled) before the shard serves.
                committed = partition.high_watermark
                while offset < committed:
                    data = plog.read(offset, chunk, committed, True)
                    if not data:
                        offset = committed  # nothing left below the high watermark (compacted away)
                        break
                    next_offset, replayed_batches, replayed = _replay_committed(shard, data, committed)
                    if next_offset is None:
                        break  # the next batch straddles the high watermark: wait for it to move
                    offset, batches, records = next_offset, batches + replayed_batches, records + replayed
                    # Let the broker serve other requests between chunks of a large partition.
                    await asyncio.sleep(0)
                    if handle.status is not ShardStatus.LOADING:
                        return
                if offset >= plog.log_end_offset:
                    break
                await self.broker.replica_manager.wait_for_data([partition], 1000)
                if handle.status is not ShardStatus.LOADING:
                    return
            shard.finish_load()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Clients see COORDINATOR_LOAD_IN_PROGRESS and retry; try again from scratch shortly.
            log.exception("loading %s-%d failed; retrying in 1 s", OFFSETS_TOPIC, handle.partition)
            await self.clock.sleep_ms(1000)
            if self._shards.get(handle.partition) is handle:
                handle.shard = GroupCoordinatorShard(handle.partition, self.config, self.clock)
                handle.tasks.append(asyncio.get_running_loop().create_task(self._load(handle)))
            return
        handle.status = ShardStatus.ACTIVE
        handle.tasks.append(
            asyncio.get_running_loop().create_task(
                self._write_loop(handle), name=f"group-writer-{handle.partition}"
            )
        )
        self._after_call(handle)
        log.info(
            "loaded %s-%d: %d records in %d batches, %d groups, in %d ms",
            OFFSETS_TOPIC, handle.partition, records, batches, len(shard.groups), self.clock.monotonic_ms() - start,
        )  # fmt: skip

    # --- running shard operations -----------------------------------------------------------------------------

    def shard_for(self, group_id: str) -> tuple[ShardHandle, GroupCoordinatorShard]:
        """The active shard of a group, or the KafkaError a client gets while there is none."""
        if not self._active:
            raise KafkaError(ErrorCode.coordinator_not_available)
        handle = self._shards.get(self.partition_for(group_id))
        if handle is None:
            raise KafkaError(ErrorCode.not_coordinator)
        if handle.status is ShardStatus.LOADING:
            raise KafkaError(ErrorCode.coordinator_load_in_progress)
        return handle, handle.shard

    async def call(self, group_id: str, operation: Callable[[GroupCoordinatorShard], T | Reply[T]]) -> T:
        """Run `operation` on the group's shard; wait for its reply if it is deferred. Raises KafkaError."""
        handle, shard = self.shard_for(group_id)
        try:
            result = operation(shard)
        finally:
            self._after_call(handle)
        if isinstance(result, Reply):
            return await self._wait(result)
        return result

    def call_all(self, operation: Callable[[GroupCoordinatorShard], T]) -> list[T]:
        """Run a read-only operation on every active shard (ListGroups)."""
        return [operation(h.shard) for h in list(self._shards.values()) if h.status is ShardStatus.ACTIVE]

    @staticmethod
    async def _wait(reply: Reply[T]) -> T:
        if reply.done:
            return reply.result()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def resolve(value: T) -> None:
            if not future.done():
                future.set_result(value)

        reply.add_done_callback(resolve)
        return await future

    def _after_call(self, handle: ShardHandle) -> None:
        """Hand queued appends to the writer and let the timer task see new deadlines."""
        for append in handle.shard.take_appends():
            if handle.status is ShardStatus.UNLOADED:
                if append.on_done is not None:
                    append.on_done(ErrorCode.not_coordinator)
            else:
                handle.queue.put_nowait(append)
        self._wakeup.set()

    # --- appends ----------------------------------------------------------------------------------------------

    async def _write_loop(self, handle: ShardHandle) -> None:
        queue = handle.queue
        carry: Append | None = None
        while True:
            appends = [carry if carry is not None else await queue.get()]
            carry = None
            count, size = len(appends[0].records), _estimated_size(appends[0])
            # Merge queued appends into one batch, but never past max.message.bytes: a request too large on its
            # own must fail alone, not take its neighbours with it.
            while not queue.empty() and count < MAX_RECORDS_PER_APPEND:
                following = queue.get_nowait()
                if size + _estimated_size(following) > MAX_MERGED_BATCH_BYTES:
                    carry = following
                    break
                appends.append(following)
                count += len(following.records)
                size += _estimated_size(following)
            try:
                error = await self._append(handle, appends)
            except asyncio.CancelledError:
                # Unloaded mid-append: whoever waits for these appends (or the one held back) still gets an answer.
                self._finish(
                    handle, appends + ([carry] if carry is not None else []), ErrorCode.not_coordinator
                )
                raise
            except Exception:
                # A bug must not kill the writer: every later append of this shard would wait forever.
                log.exception("appending to %s-%d failed unexpectedly", OFFSETS_TOPIC, handle.partition)
                error = ErrorCode.unknown_server_error
            if handle.status is not ShardStatus.ACTIVE:
                error = error or ErrorCode.not_coordinator
            self._finish(handle, appends, error)
            if error in MAYBE_WRITTEN and handle.status is ShardStatus.ACTIVE:
                # The records are in the log but not yet at the high watermark: they may still be committed
                # (or lost with this leader). Rebuild the shard from the log, which replays them only once the
                # high watermark covers them, so that its state never differs from the committed log.
                log.warning("reloading %s-%d after an append that may yet be committed", OFFSETS_TOPIC,
                            handle.partition)  # fmt: skip
                asyncio.get_running_loop().call_soon(self._reload, handle)
                return
            if handle.status is ShardStatus.ACTIVE:
                self._after_call(handle)

    def _reload(self, handle: ShardHandle) -> None:
        if self._shards.get(handle.partition) is handle:
            self._unload(handle.partition)
            self._on_leadership(OFFSETS_TOPIC, handle.partition, True, handle.leader_epoch)

    @staticmethod
    def _finish(handle: ShardHandle, appends: list[Append], error: ErrorCode | None) -> None:
        for append in appends:
            if append.on_done is None:
                continue
            try:
                append.on_done(error)
            except Exception:
                log.exception(
                    "group coordinator continuation failed on %s-%d", OFFSETS_TOPIC, handle.partition
                )

    async def _append(self, handle: ShardHandle, appends: list[Append]) -> ErrorCode | None:
        records = [record for append in appends for record in append.records]
        if not records:
            return None
        codec = self.broker.config["offsets.topic.compression.codec"]
        batch = build_batch(
            records, timestamp_ms=appends[-1].timestamp_ms or self.clock.time_ms(), codec=codec
        )
        try:
            result = await self.broker.replica_manager.append(
                OFFSETS_TOPIC,
                handle.partition,
                batch,
                read_header(batch),
                acks=-1,
                timeout_ms=self.broker.config["offsets.commit.timeout.ms"],
            )
        except KafkaError as exc:
            log.warning("append to %s-%d failed: %s", OFFSETS_TOPIC, handle.partition, exc.error_code.name)
            return exc.error_code
        except Exception:
            log.exception("append to %s-%d failed", OFFSETS_TOPIC, handle.partition)
            return ErrorCode.unknown_server_error
        if handle.status is ShardStatus.ACTIVE:
            for i, (key, value) in enumerate(records):
                handle.shard.replay(key, value, result.base_offset + i)
        return None

    # --- timers -----------------------------------------------------------------------------------------------

    async def _drive_timers(self) -> None:
        while True:
            # Clear before reading deadlines: a shard call that lands meanwhile sets it again and is seen.
            self._wakeup.clear()
            now = self.clock.monotonic_ms()
            deadlines = [d for h in self._shards.values() if h.status is ShardStatus.ACTIVE
                         if (d := h.shard.next_deadline()) is not None]  # fmt: skip
            timeout_ms = max(min(deadlines) - now, 0) if deadlines else None
            if timeout_ms is None or timeout_ms > 0:
                # Not asyncio.wait_for: on Python 3.11 it can swallow a cancellation that races with the event,
                # and then stop() would wait for this task forever.
                alarm = None if timeout_ms is None else self.clock.call_later_ms(timeout_ms, self._wakeup.set)
                try:
                    await self._wakeup.wait()
                finally:
                    if alarm is not None:
                        alarm.cancel()
            for handle in list(self._shards.values()):
                if handle.status is not ShardStatus.ACTIVE:
                    continue
                try:
                    fired = handle.shard.poll_timers()
                except Exception:
                    log.exception("group coordinator timer failed on %s-%d", OFFSETS_TOPIC, handle.partition)
                    fired = 1
                if fired:
                    self._after_call(handle)
            await asyncio.sleep(0)  # never monopolise the loop, whatever the shards do

    # --- the topic ----------------------------------------------------------------------------------------------

    def ensure_offsets_topic(self) -> bool:
        """True when `__consumer_offsets` exists; otherwise start creating it (its logs are made off the event
        loop) and return False: the client retries FindCoordinator."""
        creating = self._offsets_topic_creation
        if creating is not None and not creating.done():
            return False
        if OFFSETS_TOPIC in self.broker.metadata.topics():
            return True
        self._offsets_topic_creation = asyncio.get_running_loop().create_task(self._create_offsets_topic())
        return False

    async def _create_offsets_topic(self) -> None:
        config = self.broker.config
        live_brokers = len(self.broker.metadata.brokers())
        replication = config["offsets.topic.replication.factor"]
        if self.broker.member is None:
            replication = max(1, min(replication, live_brokers))
        elif live_brokers < replication:
            # Kafka's answer: no offsets topic below its replication factor (FindCoordinator keeps answering
            # COORDINATOR_NOT_AVAILABLE until enough brokers are up).
            log.error("cannot create %s: %d live brokers, below offsets.topic.replication.factor %d",
                      OFFSETS_TOPIC, live_brokers, replication)  # fmt: skip
            return
        try:
            await self.broker.create_topic(
                OFFSETS_TOPIC,
                config["offsets.topic.num.partitions"],
                replication,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(config["offsets.topic.segment.bytes"]),
                    "compression.type": "producer",
                },
                internal=True,
            )
        except KafkaError as exc:
            if exc.error_code is not ErrorCode.topic_already_exists:
                log.error("cannot create %s: %s", OFFSETS_TOPIC, exc.message or exc.error_code.name)
            return
        log.info("created %s with replication factor %d", OFFSETS_TOPIC, replication)


def iter_key_values(data: Any, header: Any) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of one batch: the loader's hot loop.

    `decode_records` builds full Record objects (timestamps, headers); loading a large partition only needs keys
    and values, so uncompressed batches (what the coordinator writes) are walked here directly. Compressed
    batches go through `decode_records`.
    """
    if header.codec != CODEC_NONE:
        for record in decode_records(data, header):
            yield record.offset, record.key, record.value
        return
    body = bytes(memoryview(data)[header.position + HEADER_SIZE : header.position + header.size])
    base = header.base_offset
    pos = 0
    for _ in range(header.record_count):
        length, pos = read_varint(body, pos)
        end = pos + length
        pos += 1  # record attributes
        _, pos = read_varint(body, pos)  # timestamp delta
        delta, pos = read_varint(body, pos)
        size, pos = read_varint(body, pos)
        key = None
        if size >= 0:
            key = body[pos : pos + size]
            pos += size
        size, pos = read_varint(body, pos)
        value = None if size < 0 else body[pos : pos + size]
        if end > len(body):
            raise InvalidRecords(ErrorCode.corrupt_message, "record length runs past the batch")
        yield base + delta, key, value
        pos = end


def _replay_committed(shard: GroupCoordinatorShard, data: Any, committed: int) -> tuple[int | None, int, int]:
    """Replay the batches of `data` that end at or below `committed` (the high watermark): the offset after the
    last one (None when there was none), and how many batches and records were replayed."""
    next_offset, batches, records = None, 0, 0
    for header in iter_headers(data):
        if header.next_offset > committed:
            break
        batches += 1
        if header.is_control:
            _replay_marker(shard, data, header)
        else:
            producer_id, transactional = header.producer_id, header.is_transactional
            for offset, key, value in iter_key_values(data, header):
                if key is None:
                    continue  # Kafka requires keys here; a keyless record is not ours
                shard.replay(key, value, offset, producer_id=producer_id, transactional=transactional)
                records += 1
        next_offset = header.next_offset
    return next_offset, batches, records


def _replay_marker(shard: GroupCoordinatorShard, data: Any, header: Any) -> None:
    """A transaction marker in `__consumer_offsets`: commits or aborts the producer's pending offsets."""
    for record in decode_records(data, header):
        if record.key is None or len(record.key) < 4:
            continue
        _, marker_type = struct.unpack_from(">hh", record.key)
        shard.replay_end_txn(header.producer_id, marker_type == CONTROL_COMMIT, record.offset)
