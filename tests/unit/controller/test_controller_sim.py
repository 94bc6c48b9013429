"""The controller in deterministic simulations: real Controllers over the in-memory ZooKeeper, simulated brokers
(sim_cluster.py). Each scenario checks the invariants on every partition-state write and convergence at the end."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode
from sim_cluster import SimCluster

from broker_runtime.cluster import zk_paths as z


def run(coro_fn, seed: int = 0, **kw):
    async def main():
        cluster = SimCluster(seed=seed, **kw)
        await coro_fn(cluster)

    asyncio.run(main())


async def three_brokers_and_topic(c: SimCluster, name: str = "t", partitions: int = 6) -> None:
    await c.start(3)
    await c.create_topic(name, {p: [(p + i) % 3 for i in range(3)] for p in range(partitions)})
    await c.settle()


def test_one_controller_and_every_partition_led() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c)
        c.check_converged()
        assert z.decode_controller_epoch(c.zk.data(z.CONTROLLER_EPOCH)) == 1
        for p in range(6):
            state = c.zk_state("t", p)
            assert state.leader == p % 3  # the first replica leads a new partition
            assert sorted(state.isr) == [0, 1, 2]
            assert state.leader_epoch == 0

    run(body)


def test_leader_failure_elects_from_the_isr() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c)
        victim = next(b for b in range(3) if b != c.controller().broker_id)
        await c.brokers[victim].crash()
        c.zk.expire(c.brokers[victim].zk, renew=False)
        await c.settle()
        c.check_converged()
        for p in range(6):
            state = c.zk_state("t", p)
            assert state.leader != victim
            assert victim not in state.isr
            if p % 3 == victim:
                assert state.leader_epoch == 1

    run(body)


@pytest.mark.parametrize("seed", range(3))
def test_controller_failure_moves_the_controller(seed: int) -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c)
        old = c.controller()
        await old.crash()
        c.zk.expire(old.zk, renew=False)
        await c.settle()
        c.check_converged()
        assert c.controller().broker_id != old.broker_id
        assert z.decode_controller_epoch(c.zk.data(z.CONTROLLER_EPOCH)) == 2
        # the old one comes back as an ordinary broker
        await c.add_broker(old.broker_id)
        await c.settle()
        c.check_converged()
        assert c.controller().broker_id != old.broker_id

    run(body, seed=seed)


def test_all_isr_dead_leaves_the_partition_offline_unless_unclean() -> None:
    async def body(c: SimCluster) -> None:
        await c.start(3)
        await c.create_topic("t", {0: [0, 1]})
        await c.settle()
        # 1 leaves the ISR (the leader reports it), then 0, the last ISR member, dies
        assert await c.brokers[0].alter_isr(("t", 0), [0]) == ErrorCode.none
        await c.settle()
        await c.brokers[0].crash()
        c.zk.expire(c.brokers[0].zk, renew=False)
        await c.settle()
        state = c.zk_state("t", 0)
        assert state.leader == z.NO_LEADER
        assert state.isr == (0,)  # the last ISR member is kept, so that a clean election stays possible
        assert not c.violations
        # unclean election through the topic config: 1 leads, alone in the ISR, marked recovering
        c.unclean_topics.add("t")
        await c.admin.set(
            z.topic_config_path("t"), z.encode_config({"unclean.leader.election.enable": "true"})
        )
        c.controller().controller.on_unclean_leader_election_enabled("t")
        await c.settle()
        state = c.zk_state("t", 0)
        assert (state.leader, state.isr, state.leader_recovery_state) == (1, (1,), 1)
        assert not c.violations

    run(body)


def test_controlled_shutdown_moves_leadership_first() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c)
        leaving = 1
        controller = c.controller()
        remaining = await controller.controller.controlled_shutdown(leaving, c.brokers[leaving].epoch)
        assert remaining == set()
        await c.settle()
        for p in range(6):
            state = c.zk_state("t", p)
            assert state.leader != leaving
            assert leaving not in state.isr
        # then the broker goes (its session closes) and nothing is left offline
        await c.brokers[leaving].controller.stop()
        c.brokers[leaving].dead = True
        await c.brokers[leaving].zk.close()
        await c.settle()
        c.check_converged()

    run(body)


def test_stale_broker_epoch_is_refused_for_controlled_shutdown() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c)
        controller = c.controller().controller
        with pytest.raises(Exception) as failed:
            await controller.controlled_shutdown(2, c.brokers[2].epoch - 1)
        assert failed.value.error_code == ErrorCode.stale_broker_epoch

    run(body)


def test_topic_deletion_deletes_every_replica_and_the_znodes() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c)
        await c.delete_topic("t")
        await c.settle()
        assert "t" not in c.zk.children(z.TOPICS)
        assert c.zk.data(z.topic_config_path("t")) is None
        assert c.zk.children(z.DELETE_TOPICS) == []
        for b in c.live():
            assert "t" not in b.cache.topics
            assert {tp for tp in b.deleted} == {
                ("t", p) for p in range(6) if b.broker_id in [(p + i) % 3 for i in range(3)]
            }
        c.check_converged()

    run(body)


def test_topic_deletion_waits_for_a_dead_replica() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c, partitions=3)
        await c.brokers[2].crash()
        c.zk.expire(c.brokers[2].zk, renew=False)
        await c.settle()
        await c.delete_topic("t")
        await c.settle()
        assert "t" in c.zk.children(z.TOPICS)  # broker 2 still holds replicas
        await c.add_broker(2)
        await c.settle()
        assert "t" not in c.zk.children(z.TOPICS)
        assert {("t", p) for p in range(3)} <= c.brokers[2].deleted | set()
        c.check_converged()

    run(body)


def test_partitions_added_get_leaders() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c, partitions=2)
        await c.add_partitions("t", {2: [2, 0, 1], 3: [0, 1, 2]})
        await c.settle()
        assert c.zk_state("t", 2).leader == 2
        assert c.zk_state("t", 3).leader == 0
        c.check_converged()

    run(body)


def test_alter_partition_is_fenced_by_epochs() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c, partitions=1)
        leader = c.brokers[0]
        assert await leader.alter_isr(("t", 0), [0, 1]) == ErrorCode.none
        await c.settle()
        assert c.zk_state("t", 0).isr == (0, 1)
        # a leader working from an old partition epoch is refused
        local = leader.replicas[("t", 0)]
        local.partition_epoch -= 1
        assert await leader.alter_isr(("t", 0), [0]) == ErrorCode.invalid_update_version
        local.partition_epoch += 1
        # a deposed leader (old leader epoch) is refused
        local.leader_epoch -= 1
        assert await leader.alter_isr(("t", 0), [0]) == ErrorCode.fenced_leader_epoch
        local.leader_epoch += 1
        # adding a broker that is not alive is refused
        await c.brokers[2].crash()
        c.zk.expire(c.brokers[2].zk, renew=False)
        await c.settle()
        assert await leader.alter_isr(("t", 0), [0, 1, 2]) == ErrorCode.ineligible_replica
        c.check_converged()

    run(body)


def test_reassignment_moves_replicas_and_completes_when_the_new_ones_are_in_sync() -> None:
    async def body(c: SimCluster) -> None:
        await c.start(4)
        await c.create_topic("t", {0: [0, 1, 2]})
        await c.settle()
        controller = c.controller().controller
        result = await controller.alter_partition_reassignments({("t", 0): (3, 1, 2)})
        assert result == {("t", 0): (ErrorCode.none, None)}
        await c.settle()
        assignment = c.zk_assignment("t").partitions[0]
        assert assignment == z.ReplicaAssignment((3, 1, 2, 0), adding=(3,), removing=(0,))
        listed = await controller.list_partition_reassignments(None)
        assert listed == {("t", 0): assignment}
        assert ("t", 0) in c.brokers[3].replicas  # the new replica was told to follow
        # the new replica catches up: the leader adds it to the ISR, which completes the reassignment
        leader = c.brokers[c.zk_state("t", 0).leader]
        assert await leader.alter_isr(("t", 0), [0, 1, 2, 3]) == ErrorCode.none
        await c.settle()
        assert c.zk_assignment("t").partitions[0] == z.ReplicaAssignment((3, 1, 2))
        state = c.zk_state("t", 0)
        assert state.leader in (3, 1, 2) and 0 not in state.isr
        assert ("t", 0) in c.brokers[0].deleted
        assert await controller.list_partition_reassignments(None) == {}
        c.check_converged()

    run(body)


def test_reassignment_cancelled_returns_to_the_original_replicas() -> None:
    async def body(c: SimCluster) -> None:
        await c.start(4)
        await c.create_topic("t", {0: [0, 1, 2]})
        await c.settle()
        controller = c.controller().controller
        await controller.alter_partition_reassignments({("t", 0): (3, 1, 2)})
        await c.settle()
        assert await controller.alter_partition_reassignments({("t", 0): None}) == {
            ("t", 0): (ErrorCode.none, None)
        }
        await c.settle()
        # back to the original replicas; like Kafka, in the order they were listed during the reassignment
        assert c.zk_assignment("t").partitions[0] == z.ReplicaAssignment((1, 2, 0))
        assert ("t", 0) in c.brokers[3].deleted
        assert await controller.alter_partition_reassignments({("t", 0): None}) == {
            ("t", 0): (ErrorCode.no_reassignment_in_progress, None)
        }
        c.check_converged()

    run(body)


def test_reassignment_through_the_admin_znode_and_validation() -> None:
    async def body(c: SimCluster) -> None:
        await c.start(3)
        await c.create_topic("t", {0: [0, 1], 1: [1, 2]})
        await c.settle()
        controller = c.controller().controller
        bad = await controller.alter_partition_reassignments(
            {("t", 0): (0, 0), ("t", 1): (7,), ("x", 0): (1,)}
        )
        assert bad[("t", 0)][0] == ErrorCode.invalid_replica_assignment
        assert bad[("t", 1)][0] == ErrorCode.invalid_replica_assignment
        assert bad[("x", 0)][0] == ErrorCode.unknown_topic_or_partition
        # kafka-reassign-partitions in ZooKeeper mode writes /admin/reassign_partitions
        await c.admin.create(z.REASSIGN_PARTITIONS, z.encode_reassignment({("t", 1): (2, 1)}))
        await c.settle()
        # only the order changed: no replica to add, so it completes at once and the znode goes away
        assert c.zk_assignment("t").partitions[1] == z.ReplicaAssignment((2, 1))
        assert c.zk.data(z.REASSIGN_PARTITIONS) is None
        c.check_converged()

    run(body)


def test_preferred_leader_election_and_auto_rebalance() -> None:
    async def body(c: SimCluster) -> None:
        await three_brokers_and_topic(c)
        await c.brokers[0].crash()
        c.zk.expire(c.brokers[0].zk, renew=False)
        await c.settle()
        await c.add_broker(0)
        await c.settle()
        # broker 0 is back but leads nothing: its partitions went to the next ISR replica
        preferred_0 = [p for p in range(6) if p % 3 == 0]
        assert all(c.zk_state("t", p).leader != 0 for p in preferred_0)
        controller = c.controller().controller
        # partitions come back into the ISR through their leaders
        for p in range(6):
            state = c.zk_state("t", p)
            if 0 not in state.isr:
                assert await c.brokers[state.leader].alter_isr(("t", p), [*state.isr, 0]) == ErrorCode.none
        await c.settle()
        results = await controller.elect_leaders({("t", 0), ("t", 1)}, 0)
        assert results[("t", 0)] == (ErrorCode.none, None)
        assert results[("t", 1)][0] == ErrorCode.election_not_needed
        await c.settle()
        assert c.zk_state("t", 0).leader == 0
        # the rest moves back by the automatic rebalance (timers fired by hand)
        controller.config.auto_leader_rebalance_enable = True
        controller._schedule_rebalance(1)
        assert c.fire_timers() == 1
        await c.settle()
        assert all(c.zk_state("t", p).leader == 0 for p in preferred_0)
        c.check_converged()

    run(body)


def test_preferred_election_through_the_admin_znode() -> None:
    async def body(c: SimCluster) -> None:
        await c.start(2)
        await c.create_topic("t", {0: [0, 1]})
        await c.settle()
        controller = c.controller().controller
        await controller.controlled_shutdown(0, c.brokers[0].epoch)  # moves leadership to 1
        await c.settle()
        assert c.zk_state("t", 0).leader == 1
        controller.ctx.shutting_down.discard(0)  # changed its mind; back in the ISR
        assert await c.brokers[1].alter_isr(("t", 0), [1, 0]) == ErrorCode.none
        await c.admin.create(z.PREFERRED_REPLICA_ELECTION, z.encode_partition_set([("t", 0)]))
        await c.settle()
        assert c.zk_state("t", 0).leader == 0
        assert c.zk.data(z.PREFERRED_REPLICA_ELECTION) is None

    run(body)


def test_cancelling_a_reassignment_never_deletes_the_last_in_sync_replicas() -> None:
    async def body(c: SimCluster) -> None:
        await c.start(3)
        await c.create_topic("t", {0: [0, 1]})
        await c.settle()
        controller = c.controller()
        assert controller.broker_id != 2
        await controller.controller.alter_partition_reassignments({("t", 0): (2, 1)})  # adding 2, removing 0
        await c.settle()
        # 2 catches up, 1 falls behind, then 0 dies: 2, a replica being added, is the only one in sync
        assert await c.brokers[0].alter_isr(("t", 0), [0, 2]) == ErrorCode.none
        await c.settle()
        victim = c.brokers[0]
        await victim.crash()
        c.zk.expire(victim.zk, renew=False)
        await c.settle()
        assert (c.zk_state("t", 0).leader, c.zk_state("t", 0).isr) == (2, (2,))
        result = await c.controller().controller.alter_partition_reassignments({("t", 0): None})
        assert result[("t", 0)][0] == ErrorCode.invalid_replica_assignment
        await c.settle()
        assert ("t", 0) not in c.brokers[2].deleted
        assert c.zk_state("t", 0).leader == 2

    run(body)
