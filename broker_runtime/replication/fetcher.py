"""Followers: fetch from the leaders with ordinary Fetch requests carrying this broker's replica id.

`ReplicaFetcherManager` keeps `num.replica.fetchers` fetchers per leader broker (a partition goes to the fetcher
its hash picks, as Kafka's AbstractFetcherManager does). Each `ReplicaFetcher` is one task with its own
connection to the leader, so that its long polls never hold up the controller's requests. A partition added to a
fetcher first truncates (Kafka's KIP-101/KIP-279): it asks the leader, with OffsetForLeaderEpoch, for the end
offset of its own latest epoch, and truncates its log to where the two logs agree, round after round until the
epochs match; only then does it fetch from its log end, appending the leader's batches as they are (offsets and
epochs kept) and taking the leader's high watermark (capped by its own log end). As in Kafka 2.7+, a partition
whose log has leader epochs skips that exchange: its fetches name the epoch of its last batch (Fetch v12
LastFetchedEpoch), and a leader whose log diverges there answers with the DivergingEpoch to truncate from, round
after round until the logs agree. OffsetForLeaderEpoch remains for a log without epochs, a fetch out of range
and batches that do not fit.

Appends and truncations run on the event loop, as the leader's appends do: a write reaches the page cache and
costs what a produce costs; fsyncs stay with the flush scheduler. Running them here also means a LeaderAndIsr,
handled on the same loop, never meets a half-done append.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4

from broker_runtime.cluster.broker_client import BrokerClient
from broker_runtime.errors import KafkaError
from broker_runtime.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from broker_runtime.replication.partition import Partition
from broker_runtime.replication.quota import ReplicationQuota

log = logging.getLogger(__name__)

Key = tuple[str, int]
EARLIEST_TIMESTAMP = -2
# Errors after which the partition waits for the controller's next word (a LeaderAndIsr) or retries later.
_RETRIABLE = {
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.kafka_storage_error,
    ErrorCode.leader_not_available,
}


def truncation_offset(
    leader_epoch: int,
    leader_end_offset: int,
    follower_end_for: Callable[[int], tuple[int, int]],
    follower_log_end: int,
    follower_high_watermark: int,
) -> tuple[int, bool]:
    """Where a follower truncates given the leader's answer for its latest epoch (Kafka's
    AbstractFetcherThread.getOffsetTruncationState): (offset, done). Not done means the follower had an epoch the
    leader never wrote: it truncates to that epoch's end and asks again with its now latest epoch."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(follower_high_watermark, follower_log_end), True  # the leader knows nothing older
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end_offset, follower_log_end), True
    follower_epoch, follower_end = follower_end_for(leader_epoch)
    if follower_end == UNDEFINED_EPOCH_OFFSET:
        return min(leader_end_offset, follower_log_end), True
    offset = min(leader_end_offset, follower_end, follower_log_end)
    return offset, follower_epoch == leader_epoch


@dataclass(eq=False)
class FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True  # by OffsetForLeaderEpoch before fetching (else the fetch responses say where)
    delayed_until_ms: int = 0

    def is_current(self, leader_id: int) -> bool:
        """Still a follower of `leader_id` at the epoch this state was made for (a LeaderAndIsr may have come)."""
        p = self.partition
        return not p.is_leader and p.leader_id == leader_id and p.leader_epoch == self.leader_epoch


class ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[Key, FetchState] = {}
        self._changed = asyncio.Event()
        self._client = BrokerClient(
            f"replica-fetcher-{manager.broker_id}-{leader_id}-{fetcher_id}",
            manager.listener,
            clock=manager.clock,
            request_timeout_ms=manager.config["replica.socket.timeout.ms"],
        )
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{leader_id}-{fetcher_id}")

    def add(self, state: FetchState) -> None:
        self.partitions[(state.partition.topic, state.partition.index)] = state
        self._changed.set()

    def remove(self, key: Key) -> None:
        self.partitions.pop(key, None)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._client.close()

    async def _run(self) -> None:
        clock = self.manager.clock
        while True:
            self._changed.clear()
            now = clock.monotonic_ms()
            ready = [s for s in self.partitions.values() if s.delayed_until_ms <= now]
            if not ready:
                delays = [s.delayed_until_ms - now for s in self.partitions.values()]
                waker = asyncio.ensure_future(self._changed.wait())
                try:
                    await clock.wait_ms(waker, min(delays) if delays else 3_600_000)
                finally:
                    waker.cancel()
                continue
            try:
                truncating = [s for s in ready if s.truncating]
                if truncating:
                    await self._truncate(truncating)
                fetchable = [s for s in ready if not s.truncating and s.delayed_until_ms <= now]
                if fetchable:
                    await self._fetch(fetchable)
            except (ConnectionError, TimeoutError, KafkaError) as exc:
                log.warning("fetcher %d from broker %d: %s", self.fetcher_id, self.leader_id, exc)
                await self._client.forget(self.leader_id)
                await clock.sleep_ms(self.manager.config["replica.fetch.backoff.ms"])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher %d from broker %d failed; retrying", self.fetcher_id, self.leader_id)
                await clock.sleep_ms(self.manager.config["replica.fetch.backoff.ms"])

    async def _send(self, request: Any) -> Any:
        endpoint = self.manager.endpoint(self.leader_id)
        if endpoint is None:
            raise ConnectionError(f"no endpoint known for broker {self.leader_id}")
        return await self._client.send_to(self.leader_id, endpoint[0], endpoint[1], request)

    def _delay(self, state: FetchState) -> None:
        state.delayed_until_ms = (
            self.manager.clock.monotonic_ms() + self.manager.config["replica.fetch.backoff.ms"]
        )

    def _live(self, topic: str, index: int) -> FetchState | None:
        state = self.partitions.get((topic, index))
        return state if state is not None and state.is_current(self.leader_id) else None

    # --- truncation -------------------------------------------------------------------------------------------

    async def _truncate(self, states: list[FetchState]) -> None:
        asking: dict[str, list[epoch_v4.OffsetForLeaderPartition]] = {}
        for s in states:
            plog = s.partition.log
            epoch = plog.latest_epoch()
            if epoch == UNDEFINED_EPOCH:  # nothing to compare: keep what the high watermark says is committed
                self._truncate_to(s, s.partition.high_watermark, done=True)
                continue
            asking.setdefault(s.partition.topic, []).append(
                epoch_v4.OffsetForLeaderPartition(
                    partition=s.partition.index, current_leader_epoch=s.leader_epoch, leader_epoch=epoch
                )
            )
        if not asking:
            return
        response = await self._send(
            epoch_v4.OffsetForLeaderEpochRequest(
                replica_id=self.manager.broker_id,
                topics=tuple(
                    epoch_v4.OffsetForLeaderTopic(topic=t, partitions=tuple(ps)) for t, ps in asking.items()
                ),
            )
        )
        for topic in response.topics:
            for p in topic.partitions:
                state = self._live(topic.topic, p.partition)
                if state is None or not state.truncating:
                    continue
                if p.error_code != ErrorCode.none:
                    log.info("%s-%d: OffsetForLeaderEpoch from broker %d: %s", topic.topic, p.partition,
                             self.leader_id, p.error_code.name)  # fmt: skip
                    self._delay(state)
                    continue
                plog = state.partition.log
                offset, done = truncation_offset(
                    p.leader_epoch, p.end_offset, plog.end_offset_for_epoch, plog.log_end_offset,
                    state.partition.high_watermark,
                )  # fmt: skip
                self._truncate_to(state, offset, done=done)

    def _truncate_to(self, state: FetchState, offset: int, *, done: bool) -> None:
        partition = state.partition
        plog = partition.log
        if offset < plog.log_end_offset:
            log.info("%s: truncating from %d to %d (leader %d, epoch %d)", plog.name, plog.log_end_offset, offset,
                     self.leader_id, state.leader_epoch)  # fmt: skip
        plog.truncate_to(offset)  # at the log end too: it drops an epoch we began as leader but never wrote
        partition.high_watermark = min(partition.high_watermark, plog.log_end_offset)
        state.truncating = not done

    async def _out_of_range(self, state: FetchState) -> None:
        """The leader has no data at our log end: either we are ahead of it (truncate again, by epochs) or it
        deleted what we lack (start our log empty at its log start, as Kafka's truncateFullyAndStartAt)."""
        partition = state.partition
        response = await self._send(
            list_offsets_v7.ListOffsetsRequest(
                replica_id=self.manager.broker_id, isolation_level=0,
                topics=(list_offsets_v7.ListOffsetsTopic(name=partition.topic, partitions=(
                    list_offsets_v7.ListOffsetsPartition(
                        partition_index=partition.index, current_leader_epoch=state.leader_epoch,
                        timestamp=EARLIEST_TIMESTAMP,
                    ),
                )),),
            )
        )  # fmt: skip
        if self._live(partition.topic, partition.index) is not state:
            return
        answer = response.topics[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            self._delay(state)
            return
        if answer.offset > partition.log.log_end_offset:
            log.info("%s: leader %d starts at %d, past our log end %d: starting the log there",
                     partition.log.name, self.leader_id, answer.offset, partition.log.log_end_offset)  # fmt: skip
            partition.log.truncate_fully_and_start_at(answer.offset)
            partition.high_watermark = answer.offset
        else:
            state.truncating = True

    # --- fetching ---------------------------------------------------------------------------------------------

    async def _fetch(self, states: list[FetchState]) -> None:
        config = self.manager.config
        quota = self.manager.quota
        by_topic: dict[str, list[fetch_v12.FetchPartition]] = {}
        for s in states:
            p = s.partition
            if quota.throttles_follower(p) and quota.follower.exceeded():
                continue  # Kafka's follower side: a throttled replica waits while the quota is used up
            by_topic.setdefault(p.topic, []).append(
                fetch_v12.FetchPartition(
                    partition=p.index, current_leader_epoch=s.leader_epoch, fetch_offset=p.log.log_end_offset,
                    last_fetched_epoch=p.log.latest_epoch(), log_start_offset=p.log.log_start_offset,
                    partition_max_bytes=config["replica.fetch.max.bytes"],
                )
            )  # fmt: skip
        if not by_topic:
            await self.manager.clock.sleep_ms(quota.follower.window_ms / 10)
            return
        request = fetch_v12.FetchRequest(
            replica_id=self.manager.broker_id,
            max_wait=datetime.timedelta(milliseconds=config["replica.fetch.wait.max.ms"]),
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            topics=tuple(fetch_v12.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=(),
        )
        requested = {(t, p.partition): p.fetch_offset for t, ps in by_topic.items() for p in ps}
        response = await self._send(request)
        for topic in response.responses:
            for data in topic.partitions:
                state = self._live(topic.topic, data.partition_index)
                if state is None or state.truncating:
                    continue
                partition = state.partition
                if requested.get((topic.topic, data.partition_index)) != partition.log.log_end_offset:
                    continue  # the log changed while the request was out (a truncation): ask again
                if data.error_code == ErrorCode.none and _diverges(data):
                    self._truncate_on_fetch(state, data.diverging_epoch)
                elif data.error_code == ErrorCode.offset_out_of_range:
                    await self._out_of_range(state)
                elif data.error_code != ErrorCode.none:
                    if data.error_code not in _RETRIABLE:
                        log.warning("%s: fetch from broker %d: %s", partition.log.name, self.leader_id,
                                    data.error_code.name)  # fmt: skip
                    self._delay(state)
                else:
                    self._append(state, data)

    def _truncate_on_fetch(self, state: FetchState, diverging: Any) -> None:
        """The leader's log diverges from ours at the epoch of our last batch: truncate where they agree (Kafka's
        truncateOnFetchResponse); the next fetch names our new last epoch, and the leader checks again."""
        plog = state.partition.log
        offset, _ = truncation_offset(
            diverging.epoch, diverging.end_offset, plog.end_offset_for_epoch, plog.log_end_offset,
            state.partition.high_watermark,
        )  # fmt: skip
        log.info("%s: the leader's log diverges after epoch %d at offset %d", plog.name, diverging.epoch,
                 diverging.end_offset)  # fmt: skip
        before = (plog.log_end_offset, plog.latest_epoch())
        self._truncate_to(state, offset, done=True)
        if (plog.log_end_offset, plog.latest_epoch()) == before:
            # Nothing was cut (the leader knows no epoch at or below ours): asking again at once would get the
            # same answer, so wait the backoff before the next fetch.
            self._delay(state)

    def _append(self, state: FetchState, data: Any) -> None:
        partition = state.partition
        records = data.records or b""
        if records:
            try:
                partition.log.append_as_follower(records)
            except KafkaError as exc:
                # A batch that does not fit our log (diverged) or is corrupt: compare epochs again, later.
                log.warning("%s: cannot append the leader's batches: %s", partition.log.name, exc)
                state.truncating = True
                self._delay(state)
                return
            if self.manager.quota.throttles_follower(partition):
                self.manager.quota.follower.record(len(records))
        partition.update_follower_high_watermark(data.high_watermark)


def _diverges(data: Any) -> bool:
    """A fetch response partition carrying a DivergingEpoch (its default is epoch -1, end offset -1)."""
    diverging = getattr(data, "diverging_epoch", None)
    return diverging is not None and (diverging.epoch >= 0 or diverging.end_offset >= 0)


class ReplicaFetcherManager:
    """The fetchers of this broker, by (leader, fetcher id); a partition follows its leader through one."""

    def __init__(
        self,
        broker_id: int,
        clock,
        config,
        listener: str,
        endpoint: Callable[[int], tuple[str, int] | None],
        quota: ReplicationQuota,
    ) -> None:
        self.broker_id = broker_id
        self.clock = clock
        self.config = config
        self.listener = listener
        self.endpoint = endpoint
        self.quota = quota
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[Key, tuple[int, int]] = {}

    def fetcher_id(self, key: Key) -> int:
        return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % max(1, self.config["num.replica.fetchers"])

    def add_partition(self, partition: Partition) -> None:
        """Follow the partition's leader from its current leader epoch on, starting with truncation."""
        key = (partition.topic, partition.index)
        self.remove_partition(key)
        if partition.leader_id < 0:
            return
        where = (partition.leader_id, self.fetcher_id(key))
        fetcher = self._fetchers.get(where)
        if fetcher is None:
            fetcher = self._fetchers[where] = ReplicaFetcher(self, *where)
        # A log with epochs learns where it diverges from the fetch responses; one without truncates to its high
        # watermark first (nothing to compare).
        truncating = partition.log.latest_epoch() == UNDEFINED_EPOCH
        fetcher.add(FetchState(partition, partition.leader_epoch, truncating=truncating))
        self._where[key] = where

    def remove_partition(self, key: Key) -> None:
        where = self._where.pop(key, None)
        if where is not None and where in self._fetchers:
            self._fetchers[where].remove(key)

    def following(self) -> dict[Key, int]:
        """Partitions followed, with their leader."""
        return {key: where[0] for key, where in self._where.items()}

    async def shutdown(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._where.clear()
        await asyncio.gather(*(f.stop() for f in fetchers))
