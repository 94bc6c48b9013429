"""The pure parts of replication: a leader's view of its followers (high watermark, ISR expansion and shrink),
a follower's truncation point (KIP-101/KIP-279), and the throttles' byte rate. Time is a ManualClock."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from broker_runtime.clock import ManualClock
from broker_runtime.errors import KafkaError
from broker_runtime.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from broker_runtime.replication.fetcher import truncation_offset
from broker_runtime.replication.partition import FollowerState, Partition
from broker_runtime.replication.quota import ByteRate

LAG_MS = 10_000


def leader(log_end: int = 0, isr=(0, 1, 2), replicas=(0, 1, 2), high_watermark: int = 0) -> Partition:
    partition = Partition(
        topic="t", index=0, topic_id=uuid.uuid4(), log=SimpleNamespace(log_end_offset=log_end), leader_id=0,
        leader_epoch=3, replicas=list(replicas), isr=list(isr), broker_id=0, high_watermark=high_watermark,
    )  # fmt: skip
    partition.reset_followers(1_000, new_leader=True)
    return partition


# --- high watermark -----------------------------------------------------------------------------------------


def test_high_watermark_is_the_smallest_log_end_over_the_isr() -> None:
    p = leader(log_end=10)
    p.record_follower_fetch(1, 10, 0, 1_100, with_epoch=True)
    assert p.high_watermark == 0  # follower 2 has not fetched yet
    p.record_follower_fetch(2, 7, 0, 1_100, with_epoch=True)
    assert p.high_watermark == 7
    p.record_follower_fetch(2, 10, 0, 1_200, with_epoch=True)
    assert p.high_watermark == 10


def test_high_watermark_ignores_replicas_outside_the_isr_and_never_goes_back() -> None:
    p = leader(log_end=10, isr=(0, 1))
    p.record_follower_fetch(1, 8, 0, 1_100, with_epoch=True)
    assert p.high_watermark == 8  # follower 2, not in the ISR, is not waited for
    p.record_follower_fetch(1, 5, 0, 1_200, with_epoch=True)  # it truncated: the leader keeps its HW
    assert p.high_watermark == 8


def test_a_single_replica_leader_commits_its_log_end() -> None:
    p = leader(log_end=4, isr=(0,), replicas=(0,))
    p.maybe_advance_high_watermark()
    assert p.high_watermark == 4


def test_a_pending_expansion_is_waited_for() -> None:
    p = leader(log_end=10, isr=(0, 1))
    p.record_follower_fetch(1, 10, 0, 1_100, with_epoch=True)
    p.pending_isr = (0, 1, 2)
    p.log.log_end_offset = 12
    p.record_follower_fetch(1, 12, 0, 1_200, with_epoch=True)
    assert p.high_watermark == 10  # the maximal ISR includes 2, which has not fetched


def test_a_broker_outside_the_replicas_is_refused_with_kafkas_errors() -> None:
    p = leader(log_end=10)
    with pytest.raises(KafkaError) as with_epoch:
        p.record_follower_fetch(5, 0, 0, 1_100, with_epoch=True)
    with pytest.raises(KafkaError) as without:
        p.record_follower_fetch(5, 0, 0, 1_100, with_epoch=False)
    assert with_epoch.value.error_code.name == "unknown_leader_epoch"
    assert without.value.error_code.name == "not_leader_or_follower"


# --- ISR ----------------------------------------------------------------------------------------------------


def test_a_follower_joins_once_it_reaches_the_high_watermark_and_the_epoch_start() -> None:
    p = leader(log_end=10, isr=(0, 1), high_watermark=10)
    p.record_follower_fetch(1, 10, 0, 1_100, with_epoch=True)
    p.record_follower_fetch(2, 9, 0, 1_100, with_epoch=True)
    assert p.isr_to_expand(2) is None
    p.record_follower_fetch(2, 10, 0, 1_200, with_epoch=True)
    assert p.isr_to_expand(2) == (0, 1, 2)
    p.pending_isr = (0, 1, 2)
    assert p.isr_to_expand(2) is None  # one change at a time


def test_a_caught_up_replica_taken_out_of_the_isr_is_not_proposed_by_another_fetch() -> None:
    p = leader(log_end=10, isr=(0, 1, 2), high_watermark=10)
    p.record_follower_fetch(1, 10, 0, 1_100, with_epoch=True)
    p.record_follower_fetch(2, 10, 0, 1_100, with_epoch=True)
    p.isr = [0, 1]  # the controller took 2 out (its broker died after catching up)
    p.record_follower_fetch(1, 10, 0, 1_200, with_epoch=True)
    assert p.isr_to_expand(1) is None


def test_a_follower_behind_the_epoch_start_does_not_join() -> None:
    p = leader(log_end=10, isr=(0, 1), high_watermark=4)  # the epoch started at 10
    p.record_follower_fetch(2, 6, 0, 1_100, with_epoch=True)
    assert p.isr_to_expand(2) is None


def test_a_follower_not_caught_up_for_the_lag_time_leaves_the_isr() -> None:
    p = leader(log_end=10)  # followers count as caught up at 1_000
    p.record_follower_fetch(1, 10, 0, 1_500, with_epoch=True)
    p.record_follower_fetch(2, 5, 0, 1_500, with_epoch=True)
    assert p.isr_to_shrink(1_000 + LAG_MS, LAG_MS) is None
    assert p.isr_to_shrink(1_001 + LAG_MS, LAG_MS) == (0, 1)
    # follower 1 is at the log end: in sync however long ago it fetched
    assert p.isr_to_shrink(100_000, LAG_MS) == (0, 1)


def test_fetching_the_previous_log_end_counts_as_caught_up_at_the_previous_fetch() -> None:
    state = FollowerState()
    state.record_fetch(5, 0, now_ms=1_000, leader_end=8)  # behind
    assert state.last_caught_up_ms == 0
    state.record_fetch(8, 0, now_ms=2_000, leader_end=12)  # reached what the leader had at 1_000
    assert state.last_caught_up_ms == 1_000
    state.record_fetch(12, 0, now_ms=3_000, leader_end=12)
    assert state.last_caught_up_ms == 3_000


# --- truncation ---------------------------------------------------------------------------------------------


def follower_epochs(entries: list[tuple[int, int]], log_end: int):
    """A follower's end_offset_for_epoch over (epoch, start offset) entries, as LeaderEpochCache answers."""
    from broker_runtime.log.leader_epoch import LeaderEpochCache

    cache = LeaderEpochCache(None, None, entries)  # type: ignore[arg-type]
    return lambda epoch: cache.end_offset_for(epoch, log_end)


def test_same_epoch_truncates_to_the_smaller_end() -> None:
    # follower wrote 0..14 in epoch 1 as leader, the new leader has epoch 1 up to 10
    assert truncation_offset(1, 10, follower_epochs([(0, 0), (1, 5)], 15), 15, 8) == (10, True)


def test_an_epoch_the_leader_never_had_truncates_to_its_end_and_asks_again() -> None:
    # the follower has epoch 2 (from 12) that the leader lacks; the leader answers epoch 1 ending at 11
    offset, done = truncation_offset(1, 11, follower_epochs([(0, 0), (1, 5), (2, 12)], 20), 20, 9)
    assert (offset, done) == (11, True)
    # a follower whose epoch 1 ended earlier (at 9, where its epoch 3 began) stops there and asks again
    offset, done = truncation_offset(2, 11, follower_epochs([(0, 0), (1, 5), (3, 9)], 20), 20, 9)
    assert (offset, done) == (9, False)


def test_a_leader_without_the_epoch_leaves_the_follower_at_its_high_watermark() -> None:
    assert truncation_offset(
        UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, follower_epochs([(4, 0)], 9), 9, 6
    ) == (6, True)


def test_a_follower_never_truncates_above_its_log_end() -> None:
    assert truncation_offset(1, 50, follower_epochs([(1, 0)], 20), 20, 20) == (20, True)


# --- truncation on fetch (Fetch v12 LastFetchedEpoch / DivergingEpoch) ------------------------------------------


def leader_with_epochs(entries: list[tuple[int, int]], log_end: int) -> Partition:
    partition = leader(log_end=log_end)
    partition.log.end_offset_for_epoch = follower_epochs(entries, log_end)
    return partition


@pytest.mark.parametrize(
    ("case", "last_fetched_epoch", "fetch_offset", "diverging"),
    [
        ("no epoch named (Fetch before v12)", -1, 14, None),
        ("the follower's epoch is the leader's latest", 3, 14, None),
        ("an earlier epoch, fetching where the leader's next epoch began", 1, 10, None),
        ("an earlier epoch, fetching before it ended", 1, 7, None),
        ("the follower kept writing an epoch the leader ended sooner", 1, 12, (1, 10)),
        ("an epoch the leader never wrote (the follower led it alone)", 2, 12, (1, 10)),
        ("the follower's epoch 0 ran past where the leader's epoch 1 began", 0, 3, (0, 2)),
    ],
)
def test_the_leader_answers_where_a_followers_log_diverges(case, last_fetched_epoch, fetch_offset, diverging):
    # the leader: epoch 0 from 0, epoch 1 from 2, epoch 3 from 10, log end 20 (its cache starts at epoch 0)
    partition = leader_with_epochs([(0, 0), (1, 2), (3, 10)], 20)
    assert partition.diverging_epoch(last_fetched_epoch, fetch_offset) == diverging, case


def test_a_diverging_answer_brings_the_follower_to_where_both_logs_agree() -> None:
    """The round trips of Kafka 2.7+'s truncation on fetch: the follower (epochs 0, 1, 2 as a lone leader) fetches
    with its last epoch, truncates to what the leader answers, fetches again with its new last epoch, until the
    leader (epochs 0, 1, 3) finds no divergence."""
    leader_partition = leader_with_epochs([(0, 0), (1, 2), (3, 10)], 20)
    follower_entries, follower_end, follower_hw = [(0, 0), (1, 2), (2, 12)], 16, 9
    rounds = 0
    while True:
        epochs = follower_epochs(follower_entries, follower_end)
        last_epoch = follower_entries[-1][0]
        diverging = leader_partition.diverging_epoch(last_epoch, follower_end)
        if diverging is None:
            break
        offset, _ = truncation_offset(*diverging, epochs, follower_end, follower_hw)
        assert offset <= follower_end
        follower_end = offset
        follower_entries = [(e, s) for e, s in follower_entries if s < offset]
        rounds += 1
        assert rounds < 5
    # epoch 1 ran to 10 on the leader; the follower's offsets 10 and 11 of epoch 1 and its epoch 2 are gone
    assert (follower_end, follower_entries, rounds) == (10, [(0, 0), (1, 2)], 1)


# --- fetching from followers (KIP-392) ------------------------------------------------------------------------


RACKS = {0: "a", 1: "b", 2: "c", 3: "b"}


def leader_with_followers(**followers: tuple[int, int]) -> Partition:
    """Leader 0 of replicas 0-3 (racks a, b, c, b), log end 100, followers' (log end, log start) as given."""
    partition = leader(log_end=100, isr=(0, 1, 2, 3), replicas=(0, 1, 2, 3))
    for name, (log_end, log_start) in followers.items():
        partition.followers[int(name[1:])].log_end_offset = log_end
        partition.followers[int(name[1:])].log_start_offset = log_start
    return partition


@pytest.mark.parametrize(
    ("case", "client_rack", "fetch_offset", "isr", "preferred"),
    [
        ("no client.rack", "", 50, (0, 1, 2, 3), 0),
        ("the leader's rack", "a", 50, (0, 1, 2, 3), 0),
        ("a rack with no replica", "z", 50, (0, 1, 2, 3), 0),
        ("the most caught-up in-sync follower of the rack", "b", 50, (0, 1, 2, 3), 3),
        ("a follower without the offset yet", "c", 95, (0, 1, 2, 3), 0),
        ("a follower outside the ISR", "b", 50, (0, 1, 2), 1),
        ("no in-sync follower in the rack", "c", 50, (0, 1, 3), 0),
        ("an offset the followers deleted", "b", 5, (0, 1, 2, 3), 0),
    ],
)
def test_the_leader_sends_a_consumer_to_an_in_sync_follower_of_its_rack(case, client_rack, fetch_offset, isr,
                                                                          preferred):  # fmt: skip
    partition = leader_with_followers(r1=(80, 0), r2=(90, 0), r3=(100, 10))
    partition.isr = list(isr)
    if case == "an offset the followers deleted":
        partition.followers[1].log_start_offset = 10
    assert partition.preferred_read_replica(client_rack, fetch_offset, RACKS) == preferred, case


def test_a_follower_wakes_consumers_waiting_on_it_when_its_high_watermark_moves() -> None:
    import asyncio

    async def scenario() -> tuple[bool, bool]:
        partition = leader(log_end=10)
        partition.leader_id = 1  # a follower of broker 1
        waiter = asyncio.get_running_loop().create_future()
        partition.add_waiter(waiter)
        partition.update_follower_high_watermark(0)
        unchanged = waiter.done()
        partition.update_follower_high_watermark(8)
        return unchanged, waiter.done()

    assert asyncio.run(scenario()) == (False, True)


def test_a_high_watermark_move_completes_only_the_produces_it_covers() -> None:
    import asyncio

    async def scenario() -> list[list[bool]]:
        partition = leader(log_end=30)
        loop = asyncio.get_running_loop()
        waiting = {needed: loop.create_future() for needed in (25, 10, 20)}  # arrival order is not offset order
        for needed, future in waiting.items():
            partition.add_produce_waiter(needed, future)
        seen = []
        for end in (9, 20, 30):
            partition.record_follower_fetch(1, end, 0, 1_100, with_epoch=True)
            partition.record_follower_fetch(2, end, 0, 1_100, with_epoch=True)
            seen.append([waiting[n].done() for n in (10, 20, 25)])
        return seen

    assert asyncio.run(scenario()) == [[False, False, False], [True, True, False], [True, True, True]]


def test_a_change_of_role_or_isr_wakes_every_waiting_produce_to_check_again() -> None:
    import asyncio

    async def scenario() -> tuple[bool, bool]:
        partition = leader(log_end=30)
        loop = asyncio.get_running_loop()
        gave_up, waiting = loop.create_future(), loop.create_future()
        partition.add_produce_waiter(10, gave_up)
        partition.add_produce_waiter(20, waiting)
        gave_up.cancel()  # a produce that timed out leaves its entry, dropped when reached
        partition.wake_waiters()
        return waiting.done(), bool(partition._produce_waiters)

    assert asyncio.run(scenario()) == (True, False)


# --- throttles ----------------------------------------------------------------------------------------------


def test_byte_rate_spans_the_sampled_windows() -> None:
    clock = ManualClock()
    rate = ByteRate(clock, bound=lambda: 1_000, windows=lambda: 3, window_ms=lambda: 1_000)
    rate.record(1_500)
    assert rate.rate() == pytest.approx(750)  # over at least (windows - 1) windows: 1500 B / 2 s
    assert not rate.exceeded()
    rate.record(1_000)
    assert rate.exceeded()  # 2500 B / 2 s
    clock.advance(3_000)  # the samples age out
    assert rate.rate() == 0 and not rate.exceeded()


def test_an_unbounded_rate_is_never_exceeded() -> None:
    clock = ManualClock()
    rate = ByteRate(clock, bound=lambda: 2**63 - 1, windows=lambda: 11, window_ms=lambda: 1_000)
    rate.record(10**12)
    assert not rate.exceeded()
