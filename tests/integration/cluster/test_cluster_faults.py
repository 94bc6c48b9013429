"""Brokers and ZooKeeper failing under a real cluster: kill -9 of a leader and of the controller, a controlled
shutdown, a broker paused past its session timeout, ZooKeeper restarting; leadership moves by election from the
ISR, and the admin APIs that move it on request (ElectLeaders, partition reassignments). Each test has a cluster
of its own (`cluster_factory`)."""

from __future__ import annotations

import os
import signal

import pytest

pytestmark = pytest.mark.odradek_only


def leaders(cluster, topic: str, partitions: int) -> dict[int, int]:
    return {p: cluster.partition_state(topic, p)["leader"] for p in range(partitions)}


def test_leader_killed_moves_leadership_within_the_isr_and_it_rejoins(
    cluster_factory, topic_name: str
) -> None:
    c = cluster_factory()
    c.create_topic(topic_name, 3, 3)
    c.wait_for_leaders(topic_name, 3)
    victim = c.partition_state(topic_name, 0)["leader"]
    before = {p: c.partition_state(topic_name, p) for p in range(3)}
    c.brokers[victim].kill()
    survivors = set(c.brokers) - {victim}

    def victim_gone():
        # Two steps, as in Kafka: new leaders for the victim's partitions, then the victim out of every ISR.
        view = c.wait_for_leaders(topic_name, 3, survivors)
        return view if all(victim not in isr for _, _, isr in view.values()) else None

    view = c.wait_for(victim_gone, f"broker {victim} out of every ISR of {topic_name}")
    for p, (leader, _, isr) in view.items():
        assert leader != victim and victim not in isr
        state = c.partition_state(topic_name, p)
        assert leader in before[p]["isr"]  # elected from the ISR
        if before[p]["leader"] == victim:
            assert state["leader_epoch"] > before[p]["leader_epoch"]
    c.restart(victim)
    assert victim in c.registered()
    c.wait_for_leaders(topic_name, 3)


def test_controller_killed_another_takes_over_with_a_new_epoch(cluster_factory, topic_name: str) -> None:
    c = cluster_factory()
    old = c.controller_id()
    epoch = int(c.znode("/controller_epoch"))
    c.brokers[old].kill()
    new = c.wait_for(lambda: c.controller_id() not in (None, old) and c.controller_id(), "a new controller")
    assert int(c.znode("/controller_epoch")) == epoch + 1
    # the new controller works: a topic gets leaders on the survivors only
    c.brokers.pop(old)
    c.create_topic(topic_name, 2, 2)
    view = c.wait_for_leaders(topic_name, 2)
    assert {leader for leader, _, _ in view.values()} <= set(c.brokers)
    assert new in c.brokers


def test_sigterm_moves_leadership_away_before_the_broker_exits(cluster_factory, topic_name: str) -> None:
    c = cluster_factory()
    c.create_topic(topic_name, 6, 3)
    c.wait_for_leaders(topic_name, 6)
    leaving = next(b for b in c.brokers if b != c.controller_id())
    led = [p for p, leader in leaders(c, topic_name, 6).items() if leader == leaving]
    assert led
    assert c.brokers[leaving].stop() == 0  # exit code 0 is asserted by stop() too
    log = c.brokers[leaving].log_text()
    assert "controlled shutdown of broker" in log and "succeeded" in log
    for p in led:
        state = c.partition_state(topic_name, p)
        assert state["leader"] != leaving and leaving not in state["isr"]
    c.restart(leaving)


def test_a_broker_paused_past_its_session_stops_leading_and_comes_back(
    cluster_factory, topic_name: str
) -> None:
    c = cluster_factory()
    c.create_topic(topic_name, 3, 1)
    view = c.wait_for_leaders(topic_name, 3)
    paused = next(b for b in c.brokers if b != c.controller_id())
    epoch = c.zk.get(f"/brokers/ids/{paused}")[1].czxid
    os.kill(c.brokers[paused].pid, signal.SIGSTOP)
    try:
        c.wait_for(lambda: paused not in c.registered(), "the paused broker's session to expire")
    finally:
        os.kill(c.brokers[paused].pid, signal.SIGCONT)
    c.wait_for(lambda: paused in c.registered(), "the broker to register again")
    assert c.zk.get(f"/brokers/ids/{paused}")[1].czxid != epoch  # a new registration, a new broker epoch
    c.wait_for(lambda: "stops leading" in c.brokers[paused].log_text(), "the broker fencing its leaderships")
    # its partitions (one replica each) lead again, at a new leader epoch
    view2 = c.wait_for_leaders(topic_name, 3)
    assert view2 == view
    led = [p for p, (leader, _, _) in view.items() if leader == paused]
    for p in led:
        assert c.partition_state(topic_name, p)["leader_epoch"] >= 1


def test_a_zookeeper_restart_is_survived(
    cluster_factory, zookeeper_factory, topic_name: str, helpers
) -> None:
    zk = zookeeper_factory()
    import tests.integration.cluster.conftest as harness

    c = harness.Cluster(helpers, zk.data_dir.parent / f"zk-restart-{topic_name}", zk.connect_string("/odradek"), 3, {},
                        topic_name[:20])  # fmt: skip
    try:
        c.start()
        c.create_topic(topic_name, 3, 1)
        c.wait_for_leaders(topic_name, 3)
        controller = c.controller_id()
        zk.restart()  # brief: the sessions survive, unless a slow machine lets one expire
        c.wait_for(lambda: c.registered() == {0, 1, 2}, "brokers registered after the restart")
        expired = any("session expired" in b.log_text() for b in c.brokers.values())
        _create_retrying(c, topic_name + "-2", 2, 2)
        c.wait_for_leaders(topic_name + "-2", 2)
        if not expired:
            assert c.controller_id() == controller
        for b in c.brokers.values():  # a request caught by an expiry got an error answer, not a closed connection
            assert "handler of CREATE_TOPICS" not in b.log_text()
    finally:
        c.stop()


def _create_retrying(c, name: str, partitions: int, replication: int) -> None:
    """A creation answered with an error while a session was being replaced is asked again, as an operator would."""
    from confluent_kafka import KafkaException
    from confluent_kafka.error import KafkaError as ClientError

    def created() -> bool:
        try:
            c.create_topic(name, partitions, replication)
        except KafkaException as exc:
            code = exc.args[0].code()
            assert code in (ClientError.UNKNOWN, ClientError.REQUEST_TIMED_OUT, ClientError.TOPIC_ALREADY_EXISTS,
                            ClientError.INVALID_REPLICATION_FACTOR), exc  # fmt: skip
            return code == ClientError.TOPIC_ALREADY_EXISTS
        return True

    c.wait_for(created, f"topic {name} created")


def test_elect_leaders_never_picks_a_replica_outside_the_isr(cluster_factory, topic_name: str) -> None:
    from kafka.admin import KafkaAdminClient

    c = cluster_factory(auto_leader_rebalance_enable="false")
    c.create_topic(topic_name, 3, 3)
    c.wait_for_leaders(topic_name, 3)
    preferred = {p: r[0] for p, r in c.znode(f"/brokers/topics/{topic_name}")["partitions"].items()}
    moved = preferred["0"]
    c.brokers[moved].stop()  # controlled shutdown: leadership and ISR membership move away

    def elect() -> dict[int, int]:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        try:
            response = admin.elect_leaders(0, {topic_name: [0, 1, 2]}, raise_errors=False)
        finally:
            admin.close()
        return {p.partition_id: p.error_code for t in response.replica_election_results for p in t.partition_result}

    errors = elect()
    assert errors[0] == 80  # PREFERRED_LEADER_NOT_AVAILABLE: the preferred replica is not in the ISR
    for p in (1, 2):
        expected = 80 if preferred[str(p)] == moved else 84  # 84: ELECTION_NOT_NEEDED
        assert errors[p] == expected
    assert c.partition_state(topic_name, 0)["leader"] != moved
    # Back, it catches up and rejoins the ISR: now it may lead again.
    c.restart(moved)
    c.wait_for(lambda: moved in c.partition_state(topic_name, 0)["isr"], "the restarted replica in the ISR")
    assert elect()[0] == 0
    assert c.partition_state(topic_name, 0)["leader"] == moved


def test_a_reassignment_is_visible_while_it_runs_and_can_be_cancelled(
    cluster_factory, topic_name: str
) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition

    # Broker 2's copy is throttled to a byte a second (a fetch of at most 1 KiB at a time), so it cannot catch up
    # and the move stays in progress.
    c = cluster_factory(follower_replication_throttled_rate="1", replica_fetch_max_bytes="1024")
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        from kafka.admin import NewTopic as PyNewTopic

        admin.create_topics([PyNewTopic(
            topic_name, -1, -1, replica_assignments={0: [0, 1]},
            topic_configs={"follower.replication.throttled.replicas": "0:2"},
        )])  # fmt: skip
        c.wait_for_leaders(topic_name, 1)
        producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks=1, linger_ms=0)
        for _ in range(50):
            producer.send(topic_name, b"x" * 200, partition=0).get(30)
        producer.close()
        tp = TopicPartition(topic_name, 0)
        admin.alter_partition_reassignments({tp: [0, 2]})
        listed = c.wait_for(lambda: admin.list_partition_reassignments().get(tp), "the reassignment listed")
        assert (listed["replicas"], listed["adding_replicas"], listed["removing_replicas"]) == (
            [0, 2, 1],
            [2],
            [1],
        )
        assignment = c.znode(f"/brokers/topics/{topic_name}")
        assert (assignment["partitions"]["0"], assignment["adding_replicas"], assignment["removing_replicas"]) == (
            [0, 2, 1], {"0": [2]}, {"0": [1]},
        )  # fmt: skip
        c.wait_for(lambda: (c.brokers[2].log_dir / f"{topic_name}-0").exists(), "the new replica's log")
        admin.alter_partition_reassignments({tp: None})
        c.wait_for(lambda: not admin.list_partition_reassignments(), "the reassignment cancelled")
        assert c.znode(f"/brokers/topics/{topic_name}")["partitions"]["0"] == [0, 1]
        c.wait_for(
            lambda: not (c.brokers[2].log_dir / f"{topic_name}-0").exists(), "the added replica deleted"
        )
        # a reassignment that only drops a replica completes at once
        admin.alter_partition_reassignments({tp: [0]})
        c.wait_for(
            lambda: c.znode(f"/brokers/topics/{topic_name}")["partitions"]["0"] == [0], "the move done"
        )
        c.wait_for(
            lambda: not (c.brokers[1].log_dir / f"{topic_name}-0").exists(), "the removed replica deleted"
        )
        assert not admin.list_partition_reassignments()
    finally:
        admin.close()


def test_a_broker_without_an_id_gets_one_from_zookeeper_and_keeps_it(
    cluster_factory, helpers, request
) -> None:
    c = cluster_factory(size=1)
    overrides = {
        "broker.id": "-1", "zookeeper.connect": c.connect, "zookeeper.session.timeout.ms": "6000",
        "reserved.broker.max.id": "1000",
    }  # fmt: skip
    broker = helpers.new_broker(c.brokers[0].log_dir.parent.parent, "generated-id", overrides)
    helpers.remember_broker(request, broker)
    try:
        broker.start()
        c.wait_for(lambda: c.registered() == {0, 1001}, "a generated broker id above reserved.broker.max.id")
        assert "broker.id=1001" in (broker.log_dir / "meta.properties").read_text()
        broker.stop()
        c.wait_for(lambda: c.registered() == {0}, "the broker gone")
        broker.start()  # the id comes back from meta.properties, not from a new sequence number
        c.wait_for(lambda: c.registered() == {0, 1001}, "the same id again")
    finally:
        broker.stop()
