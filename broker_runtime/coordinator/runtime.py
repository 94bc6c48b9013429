"""The asyncio driver of a coordinator: one shard per partition of its internal topic, their loads, appends, timers.

Kafka's CoordinatorRuntime, shared by the group coordinator (`__consumer_offsets`) and the transaction coordinator
(`__transaction_state`). The runtime knows nothing of groups or transactions: it is parameterised by the topic
(`CoordinatorTopic`: name, partition count, load buffer, commit timeout, creation configs) and a factory of
shards (`coordinator/shard.py`).

Theory of operation
-------------------
- **Leadership.** The runtime listens to `ReplicaManager` leadership events. When this broker becomes leader of a
  partition of its topic it creates a shard and loads it: reads the partition from its log start up to its high
  watermark in load-buffer-sized chunks, replays those records (transaction markers included), waits until the
  high watermark reaches the log end (a new leader's last records are committed once its followers have them),
  and only then serves the partition (COORDINATOR_LOAD_IN_PROGRESS meanwhile). Losing leadership unloads the
  shard: everything parked in it is answered NOT_COORDINATOR and clients look the coordinator up again.
- **Requests.** `call_on()` runs one synchronous shard handler, hands the appends it queued to the shard's writer
  and waits for the handler's `Reply` (a JoinGroup may wait for a whole rebalance).
- **Appends.** One writer task per shard appends queued record sets in order with acks=-1 and the topic's commit
  timeout; plain ones several at a time as one batch, a producer's transactional records as a transactional
  batch of that producer, and transaction markers (`complete_transaction`) as control batches. After each append
  it replays the records into the shard at their offsets and runs the continuations, which complete replies. An
  append that failed after reaching the log (the ISR did not acknowledge in time) may still be committed: the
  shard is reloaded, so its state is always that of the log at its high watermark.
- **Timers.** One task sleeps until the earliest shard deadline and polls the due shards; every shard call wakes
  it so that a new, earlier deadline is seen at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

from broker_runtime.coordinator.shard import Append, Reply, Shard
from broker_runtime.errors import KafkaError
from broker_runtime.protocol.compression import CODEC_NONE
from broker_runtime.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    HEADER_SIZE,
    InvalidRecords,
    build_batch,
    build_control_batch,
    decode_records,
    iter_headers,
    read_header,
)
from broker_runtime.protocol.varint import read_varint

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S", bound=Shard)

# Records per appended batch when several operations are waiting: bounds batch size, keeps latency low.
MAX_RECORDS_PER_APPEND = 2000
# Merged batches stay well under the default max.message.bytes (1048588) of the internal topics.
MAX_MERGED_BATCH_BYTES = 512 * 1024
# Kafka's partition-load-time-max/avg: a Max and an Avg over two 30-second samples, so a load counts for up to a
# minute after it finished (its documentation says "the last 30sec"); no load in the window reads NaN.
LOAD_TIME_WINDOW_MS = 60_000
# A failed load is retried from scratch after this long (clients see COORDINATOR_LOAD_IN_PROGRESS meanwhile).
LOAD_RETRY_MS = 1000

# Append errors raised after the records reached this leader's log (waiting for the ISR): they may still commit.
MAYBE_WRITTEN = frozenset({ErrorCode.request_timed_out, ErrorCode.not_enough_replicas_after_append})

# What a transaction marker's writer answers instead of "this coordinator is not ready": the transaction
# coordinator expects partition errors and retries NOT_LEADER_OR_FOLLOWER (Kafka's KafkaApis does the same).
_NOT_READY = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress}
)


@dataclass(frozen=True, slots=True)
class CoordinatorTopic:
    """The internal topic a coordinator keeps its state in, and the settings the runtime reads for it."""

    name: str
    num_partitions: int  # when the runtime creates the topic; an existing topic keeps its own count
    replication_factor: int
    load_buffer_bytes: int  # offsets.load.buffer.size, transaction.state.log.load.buffer.size
    commit_timeout_ms: int  # how long an append waits for the ISR
    compression_codec: int = CODEC_NONE
    topic_configs: Mapping[str, str] = field(default_factory=dict)  # configs the topic is created with
    # How long a transaction marker's append waits for the ISR (Kafka: request.timeout.ms); None: commit timeout.
    marker_timeout_ms: int | None = None


def _estimated_size(append: Append) -> int:
    """Uncompressed bytes the append adds to a batch (record framing included, roughly)."""
    return sum(len(key) + len(value or b"") + 16 for key, value in append.records)


def _mergeable(first: Append, following: Append) -> bool:
    """Plain appends share batches; transactional records and markers are batches of their own."""
    return (
        not first.is_transactional
        and first.marker_committed is None
        and following.batch_key == first.batch_key
    )


class ShardStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADED = "unloaded"


@dataclass(eq=False)
class ShardHandle(Generic[S]):
    partition: int
    leader_epoch: int
    shard: S
    status: ShardStatus = ShardStatus.LOADING
    queue: asyncio.Queue[Append] = field(default_factory=asyncio.Queue)
    tasks: list[asyncio.Task] = field(default_factory=list)


class CoordinatorRuntime(Generic[S]):
    """Shards of one coordinator on this broker. `new_shard(partition)` makes the empty shard a load fills;
    `describe(shard)` adds a few words about a loaded shard to the log line."""

    def __init__(
        self,
        broker: Broker,
        topic: CoordinatorTopic,
        new_shard: Callable[[int], S],
        *,
        name: str,
        describe: Callable[[S], str] | None = None,
    ) -> None:
        self.broker = broker
        self.clock = broker.clock
        self.topic = topic
        self.name = name
        self._new_shard = new_shard
        self._describe = describe
        self._shards: dict[int, ShardHandle[S]] = {}
        self._wakeup = asyncio.Event()
        self._timer_task: asyncio.Task | None = None
        self._topic_creation: asyncio.Task | None = None
        self._active = False
        # (finished at, took) in monotonic ms of each load in Kafka's partition-load-time window, oldest first.
        self._load_times: collections.deque[tuple[int, int]] = collections.deque()

    # --- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._active = True
        loop = asyncio.get_running_loop()
        self._timer_task = loop.create_task(self._drive_timers(), name=f"{self.name}-timers")
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
        """Partitions of the topic as it exists, else as it would be created."""
        topic = self.broker.metadata.topics().get(self.topic.name)
        return len(topic.partitions) if topic is not None else self.topic.num_partitions

    def is_loading(self) -> bool:
        return any(h.status is ShardStatus.LOADING for h in self._shards.values())

    def active_shards(self) -> list[S]:
        return [h.shard for h in self._shards.values() if h.status is ShardStatus.ACTIVE]

    def is_active(self, partition: int) -> bool:
        handle = self._shards.get(partition)
        return handle is not None and handle.status is ShardStatus.ACTIVE

    # --- running shard operations -------------------------------------------------------------------------

    def active_handle(self, partition: int) -> ShardHandle[S]:
        """The partition's shard when it serves, or the KafkaError a client gets while it does not."""
        if not self._active:
            raise KafkaError(ErrorCode.coordinator_not_available)
        handle = self._shards.get(partition)
        if handle is None:
            raise KafkaError(ErrorCode.not_coordinator)
        if handle.status is ShardStatus.LOADING:
            raise KafkaError(ErrorCode.coordinator_load_in_progress)
        return handle

    async def call_on(self, partition: int, operation: Callable[[S], T | Reply[T]]) -> T:
        """Run `operation` on the partition's shard; wait for its reply if it is deferred. Raises KafkaError."""
        handle = self.active_handle(partition)
        try:
            result = operation(handle.shard)
        finally:
            self.after_call(handle)
        if isinstance(result, Reply):
            return await self._wait(result)
        return result

    def call_all(self, operation: Callable[[S], T]) -> list[T]:
        """Run a read-only operation on every active shard (ListGroups, ListTransactions)."""
        return [operation(h.shard) for h in list(self._shards.values()) if h.status is ShardStatus.ACTIVE]

    def for_each_active(self, operation: Callable[[S], Any]) -> None:
        """Run an operation that may write on every active shard, without waiting for its appends."""
        for handle in list(self._shards.values()):
            if handle.status is ShardStatus.ACTIVE:
                operation(handle.shard)
                self.after_call(handle)

    async def complete_transaction(
        self, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool
    ) -> ErrorCode:
        """Write a transaction marker (COMMIT or ABORT control batch) to `partition` through the shard's writer,
        after every append queued before it, replay it into the shard, and answer the WriteTxnMarkers partition
        error (Kafka's CoordinatorRuntime.scheduleTransactionCompletion)."""
        handle = self._shards.get(partition)
        if not self._active or handle is None or handle.status is not ShardStatus.ACTIVE:
            return ErrorCode.not_leader_or_follower
        future: asyncio.Future[ErrorCode | None] = asyncio.get_running_loop().create_future()

        def on_done(error: ErrorCode | None) -> None:
            if not future.done():
                future.set_result(error)

        handle.queue.put_nowait(
            Append(
                [], on_done, self.clock.time_ms(), producer_id, producer_epoch, committed, coordinator_epoch
            )
        )
        error = await future
        if error is None:
            return ErrorCode.none
        return ErrorCode.not_leader_or_follower if error in _NOT_READY else error

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

    def after_call(self, handle: ShardHandle[S]) -> None:
        """Hand queued appends to the writer and let the timer task see new deadlines."""
        for append in handle.shard.take_appends():
            if handle.status is ShardStatus.UNLOADED:
                if append.on_done is not None:
                    append.on_done(ErrorCode.not_coordinator)
            else:
                handle.queue.put_nowait(append)
        self._wakeup.set()

    # --- leadership, load, unload ---------------------------------------------------------------------------

    def _on_leadership(self, topic: str, index: int, is_leader: bool, leader_epoch: int) -> None:
        if topic != self.topic.name or not self._active:
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
            handle = ShardHandle(index, leader_epoch, self._new_shard(index))
            self._shards[index] = handle
            loop = asyncio.get_running_loop()
            handle.tasks.append(loop.create_task(self._load(handle), name=f"{self.name}-load-{index}"))

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
        log.info("unloaded %s coordinator for %s-%d", self.name, self.topic.name, index)

    async def _load(self, handle: ShardHandle[S]) -> None:
        start = self.clock.monotonic_ms()
        topic = self.topic.name
        partition = self.broker.replica_manager.get_partition(topic, handle.partition)
        if partition is None:
            log.error("cannot load %s-%d: this broker does not host it", topic, handle.partition)
            return
        plog = partition.log
        chunk = self.topic.load_buffer_bytes
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
                    next_offset, replayed_batches, replayed = replay_committed(shard, data, committed)
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
            log.exception("loading %s-%d failed; retrying in 1 s", topic, handle.partition)
            await self.clock.sleep_ms(LOAD_RETRY_MS)
            if self._shards.get(handle.partition) is handle:
                handle.shard = self._new_shard(handle.partition)
                handle.tasks.append(asyncio.get_running_loop().create_task(self._load(handle)))
            return
        handle.status = ShardStatus.ACTIVE
        handle.tasks.append(
            asyncio.get_running_loop().create_task(
                self._write_loop(handle), name=f"{self.name}-writer-{handle.partition}"
            )
        )
        self.after_call(handle)
        finished = self.clock.monotonic_ms()
        self._load_times.append((finished, finished - start))
        self._forget_old_load_times(finished)
        described = f", {self._describe(shard)}" if self._describe is not None else ""
        log.info(
            "loaded %s-%d: %d records in %d batches%s, in %d ms",
            topic, handle.partition, records, batches, described, finished - start,
        )  # fmt: skip

    def load_times_ms(self) -> list[int]:
        """How long the loads that finished within Kafka's partition-load-time window took, in ms."""
        self._forget_old_load_times(self.clock.monotonic_ms())
        return [took for _, took in self._load_times]

    def _forget_old_load_times(self, now: int) -> None:
        while self._load_times and self._load_times[0][0] <= now - LOAD_TIME_WINDOW_MS:
            self._load_times.popleft()

    # --- appends ----------------------------------------------------------------------------------------------

    async def _write_loop(self, handle: ShardHandle[S]) -> None:
        queue = handle.queue
        carry: Append | None = None
        while True:
            first = carry if carry is not None else await queue.get()
            appends = [first]
            carry = None
            count, size = len(first.records), _estimated_size(first)
            # Merge queued appends into one batch, but never past max.message.bytes: a request too large on its
            # own must fail alone, not take its neighbours with it.
            while not queue.empty() and count < MAX_RECORDS_PER_APPEND:
                following = queue.get_nowait()
                if (
                    not _mergeable(first, following)
                    or size + _estimated_size(following) > MAX_MERGED_BATCH_BYTES
                ):
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
                log.exception("appending to %s-%d failed unexpectedly", self.topic.name, handle.partition)
                error = ErrorCode.unknown_server_error
            if handle.status is not ShardStatus.ACTIVE:
                error = error or ErrorCode.not_coordinator
            self._finish(handle, appends, error)
            if error in MAYBE_WRITTEN and handle.status is ShardStatus.ACTIVE:
                # The records are in the log but not yet at the high watermark: they may still be committed
                # (or lost with this leader). Rebuild the shard from the log, which replays them only once the
                # high watermark covers them, so that its state never differs from the committed log.
                log.warning("reloading %s-%d after an append that may yet be committed", self.topic.name,
                            handle.partition)  # fmt: skip
                if carry is not None:
                    handle.queue.put_nowait(carry)  # answered NOT_COORDINATOR by the unload
                asyncio.get_running_loop().call_soon(self._reload, handle)
                return
            if handle.status is ShardStatus.ACTIVE:
                self.after_call(handle)

    def _reload(self, handle: ShardHandle[S]) -> None:
        if self._shards.get(handle.partition) is handle:
            self._unload(handle.partition)
            self._on_leadership(self.topic.name, handle.partition, True, handle.leader_epoch)

    def _finish(self, handle: ShardHandle[S], appends: list[Append], error: ErrorCode | None) -> None:
        for append in appends:
            if append.on_done is None:
                continue
            try:
                append.on_done(error)
            except Exception:
                log.exception(
                    "%s coordinator continuation failed on %s-%d",
                    self.name,
                    self.topic.name,
                    handle.partition,
                )

    def _batch(self, appends: list[Append]) -> bytearray | None:
        """The batch the appends (of one batch key) are written as; None when there is nothing to write."""
        first = appends[0]
        timestamp_ms = appends[-1].timestamp_ms or self.clock.time_ms()
        if first.marker_committed is not None:
            return build_control_batch(
                CONTROL_COMMIT if first.marker_committed else CONTROL_ABORT,
                producer_id=first.producer_id,
                producer_epoch=first.producer_epoch,
                coordinator_epoch=first.coordinator_epoch,
                timestamp_ms=timestamp_ms,
            )
        records = [record for append in appends for record in append.records]
        if not records:
            return None
        if first.is_transactional:
            # As Kafka's coordinators write them: base sequence 0, appended with the coordinator's origin.
            return build_batch(
                records, timestamp_ms=timestamp_ms, codec=self.topic.compression_codec,
                producer_id=first.producer_id, producer_epoch=first.producer_epoch, base_sequence=0,
                transactional=True,
            )  # fmt: skip
        return build_batch(records, timestamp_ms=timestamp_ms, codec=self.topic.compression_codec)

    async def _append(self, handle: ShardHandle[S], appends: list[Append]) -> ErrorCode | None:
        batch = self._batch(appends)
        if batch is None:
            return None
        topic = self.topic.name
        first = appends[0]
        timeout_ms = self.topic.commit_timeout_ms
        if first.marker_committed is not None and self.topic.marker_timeout_ms is not None:
            timeout_ms = self.topic.marker_timeout_ms
        guard = {} if first.verification_guard is None else {"verification_guard": first.verification_guard}
        try:
            result = await self.broker.replica_manager.append(
                topic, handle.partition, batch, read_header(batch), acks=-1, timeout_ms=timeout_ms, **guard
            )
        except KafkaError as exc:
            log.warning("append to %s-%d failed: %s", topic, handle.partition, exc.error_code.name)
            return exc.error_code
        except Exception:
            log.exception("append to %s-%d failed", topic, handle.partition)
            return ErrorCode.unknown_server_error
        if getattr(result, "duplicate", False):
            # The log took the batch for a retry of an earlier one and wrote nothing: replaying these records at
            # that batch's offsets would corrupt the shard. Coordinator appends are never retries.
            log.error("append to %s-%d was answered as a duplicate; nothing written", topic, handle.partition)
            return ErrorCode.unknown_server_error
        if handle.status is ShardStatus.ACTIVE:
            if first.marker_committed is not None:
                handle.shard.replay_end_txn(first.producer_id, first.marker_committed, result.base_offset)
                return None
            offset = result.base_offset
            for append in appends:
                for key, value in append.records:
                    handle.shard.replay(
                        key,
                        value,
                        offset,
                        producer_id=append.producer_id,
                        transactional=append.is_transactional,
                    )
                    offset += 1
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
                    log.exception(
                        "%s coordinator timer failed on %s-%d", self.name, self.topic.name, handle.partition
                    )
                    fired = 1
                if fired:
                    self.after_call(handle)
            await asyncio.sleep(0)  # never monopolise the loop, whatever the shards do

    # --- the topic ----------------------------------------------------------------------------------------------

    def ensure_topic(self) -> bool:
        """True when the topic exists; otherwise start creating it (its logs are made off the event loop) and
        return False: the client retries FindCoordinator."""
        creating = self._topic_creation
        if creating is not None and not creating.done():
            return False
        if self.topic.name in self.broker.metadata.topics():
            return True
        self._topic_creation = asyncio.get_running_loop().create_task(self._create_topic())
        return False

    async def _create_topic(self) -> None:
        name = self.topic.name
        live_brokers = len(self.broker.metadata.brokers())
        replication = self.topic.replication_factor
        if self.broker.member is None:
            replication = max(1, min(replication, live_brokers))
        elif live_brokers < replication:
            # Kafka's answer: no internal topic below its replication factor (FindCoordinator keeps answering
            # COORDINATOR_NOT_AVAILABLE until enough brokers are up).
            log.error("cannot create %s: %d live brokers, below its replication factor %d",
                      name, live_brokers, replication)  # fmt: skip
            return
        try:
            await self.broker.create_topic(
                name, self.topic.num_partitions, replication, dict(self.topic.topic_configs), internal=True
            )
        except KafkaError as exc:
            if exc.error_code is not ErrorCode.topic_already_exists:
                log.error("cannot create %s: %s", name, exc.message or exc.error_code.name)
            return
        log.info("created %s with replication factor %d", name, replication)


# --- loading ----------------------------------------------------------------------------------------------------


def iter_key_values(data: Any, header: Any) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of one batch: the loader's hot loop.

    `decode_records` builds full Record objects (timestamps, headers); loading a large partition only needs keys
    and values, so uncompressed batches (what the coordinators write) are walked here directly. Compressed
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


def replay_committed(shard: Shard, data: Any, committed: int) -> tuple[int | None, int, int]:
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


def _replay_marker(shard: Shard, data: Any, header: Any) -> None:
    """A transaction marker: commits or aborts the producer's pending records in this partition."""
    for record in decode_records(data, header):
        if record.key is None or len(record.key) < 4:
            continue
        _, marker_type = struct.unpack_from(">hh", record.key)
        shard.replay_end_txn(header.producer_id, marker_type == CONTROL_COMMIT, record.offset)
