"""Replication between real broker processes: followers fetch from leaders, acks=all waits for the ISR,
min.insync.replicas refuses writes the ISR cannot hold, and every replica ends with the same log.

The module's cluster (`cluster`) serves the tests that leave every broker running; tests that stop or pause
brokers take one of their own (`cluster_factory`)."""

from __future__ import annotations

import datetime
import io
import os
import signal
import struct
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12

from broker_runtime.tools import leader_election
from tests.integration.conftest import (
    RawClient,
    aiokafka_produce,
    confluent_consume,
    confluent_produce,
    kafka_python_produce,
    rec_to_js,
    run_kafkajs,
)

pytestmark = pytest.mark.odradek_only

ALL_ACKS = {"acks": "all", "enable.idempotence": True}


def run_tool(tool, *argv: str) -> int:
    return tool.main(list(argv), out=io.StringIO(), err=io.StringIO())


def log_bytes(partition_dir: Path) -> bytes:
    """The partition's batches as they lie on disk, segment after segment (whole batches only)."""
    out = bytearray()
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            if length <= 0 or pos + 12 + length > len(data):
                break
            out += data[pos : pos + 12 + length]
            pos += 12 + length
    return bytes(out)


def log_end(data: bytes) -> int:
    end = pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        end, pos = base + last_delta + 1, pos + 12 + length
    return end


def replica_logs(cluster, topic: str, partition: int) -> dict[int, bytes]:
    """Each replica's log, by broker id, read from its log directory."""
    replicas = cluster.znode(f"/brokers/topics/{topic}")["partitions"][str(partition)]
    return {b: log_bytes(cluster.brokers[b].log_dir / f"{topic}-{partition}") for b in replicas}


def replicas_agree(cluster, topic: str, partition: int, end: int) -> bool:
    """Every replica holds the same batches, byte for byte, up to `end`."""
    logs = replica_logs(cluster, topic, partition)
    return len(set(logs.values())) == 1 and log_end(next(iter(logs.values()))) == end


def follower_fetch(broker, topic: str, partition: int, replica_id: int, leader_epoch: int) -> str:
    """A Fetch as broker `replica_id` would send it; the partition's error name."""
    request = fetch_v12.FetchRequest(
        replica_id=replica_id, max_wait=datetime.timedelta(0), min_bytes=1, topics=(
            fetch_v12.FetchTopic(topic=topic, partitions=(fetch_v12.FetchPartition(
                partition=partition, current_leader_epoch=leader_epoch, fetch_offset=0, partition_max_bytes=1024,
            ),)),
        ), forgotten_topics_data=(),
    )  # fmt: skip
    with RawClient.to(broker) as raw:
        response = raw.call(request)
    return ErrorCode(response.responses[0].partitions[0].error_code).name


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kafkajs"])
def test_acks_all_on_three_replicas_reaches_every_replica(
    cluster, clients, topic_name: str, client: str
) -> None:
    cluster.create_topic(topic_name, 2, 3, {"min.insync.replicas": "2"})
    cluster.wait_for_leaders(topic_name, 2)
    records = clients.numbered_records(200)
    if client == "confluent":
        offsets = confluent_produce(cluster.bootstrap, topic_name, records, 1, ALL_ACKS)
    elif client == "kafka-python":
        offsets = kafka_python_produce(cluster.bootstrap, topic_name, records, 1, acks="all")
    elif client == "aiokafka":
        offsets = aiokafka_produce(
            cluster.bootstrap, topic_name, records, 1, acks="all", enable_idempotence=True
        )
    else:
        # the kafkajs runner takes one bootstrap address
        answers = run_kafkajs("produce", cluster.brokers[0].bootstrap, topic=topic_name, acks=-1, idempotent=True,
                              messages=[rec_to_js(r, 1) for r in records])  # fmt: skip
        assert [a["errorCode"] for a in answers] == [0]
        offsets = list(range(answers[0]["baseOffset"], answers[0]["baseOffset"] + len(records)))
    assert offsets == list(range(200))
    got = clients.consume(client, cluster.brokers[2].bootstrap, topic_name, 200, 1)
    assert clients.contents(got) == clients.contents(records)
    # every replica has all of it, byte for byte at the same offsets
    cluster.wait_for(
        lambda: replicas_agree(cluster, topic_name, 1, 200), "every replica with the 200 records"
    )


def test_a_fetch_from_a_broker_outside_the_replica_set_is_refused(cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, 2)
    view = cluster.wait_for_leaders(topic_name, 1)
    leader, replicas, _ = view[0]
    outsider = ({0, 1, 2} - set(replicas)).pop()
    state = cluster.partition_state(topic_name, 0)
    with_epoch = follower_fetch(cluster.brokers[leader], topic_name, 0, outsider, state["leader_epoch"])
    without_epoch = follower_fetch(cluster.brokers[leader], topic_name, 0, outsider, -1)
    assert with_epoch == "unknown_leader_epoch"  # Kafka's answer when the request names the epoch
    assert without_epoch == "not_leader_or_follower"
    insider = next(r for r in replicas if r != leader)
    assert follower_fetch(cluster.brokers[leader], topic_name, 0, insider, state["leader_epoch"]) == "none"


def test_min_insync_replicas_refuses_acks_all_when_brokers_are_down(cluster_factory, topic_name: str) -> None:
    c = cluster_factory()
    c.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    leader, replicas, _ = c.wait_for_leaders(topic_name, 1)[0]
    followers = [r for r in replicas if r != leader]
    for f in followers:
        c.brokers[f].kill()
    c.wait_for(lambda: c.partition_state(topic_name, 0)["isr"] == [leader], "the ISR shrunk to the leader")
    producer = Producer({"bootstrap.servers": c.brokers[leader].bootstrap, "acks": "all",
                         "message.timeout.ms": 5000, "retries": 0})  # fmt: skip
    errors = []
    producer.produce(topic_name, b"refused", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
    # acks=1 still writes
    producer = Producer({"bootstrap.servers": c.brokers[leader].bootstrap, "acks": 1})
    producer.produce(topic_name, b"accepted", partition=0)
    assert producer.flush(30) == 0


def test_isr_shrinks_when_a_follower_pauses_and_grows_when_it_resumes(
    cluster_factory, topic_name: str
) -> None:
    # A short lag time so that the paused follower drops out quickly; its ZooKeeper session outlives the pause.
    c = cluster_factory(replica_lag_time_max_ms="1500", replica_fetch_wait_max_ms="200")
    c.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    leader, replicas, _ = c.wait_for_leaders(topic_name, 1)[0]
    paused = next(r for r in replicas if r != c.controller_id() and r != leader)
    os.kill(c.brokers[paused].pid, signal.SIGSTOP)
    try:
        producer = Producer({"bootstrap.servers": c.brokers[leader].bootstrap, **ALL_ACKS})
        producer.produce(topic_name, b"while paused", partition=0)
        assert producer.flush(30) == 0  # two in-sync replicas are enough once the paused one is out
        state = c.wait_for(
            lambda: (s := c.partition_state(topic_name, 0)) and paused not in s["isr"] and s, "the ISR shrunk"
        )
        assert sorted(state["isr"]) == sorted(r for r in replicas if r != paused)
    finally:
        os.kill(c.brokers[paused].pid, signal.SIGCONT)
    c.wait_for(lambda: paused in c.partition_state(topic_name, 0)["isr"], "the follower back in the ISR")


def test_consumers_see_only_records_below_the_high_watermark(
    cluster_factory, clients, topic_name: str
) -> None:
    """With a follower paused, an acks=1 record is on the leader but not below the high watermark: a consumer
    does not see it until the follower has it (or leaves the ISR)."""
    c = cluster_factory(replica_lag_time_max_ms="600000")
    c.create_topic(topic_name, 1, 2)
    leader, replicas, _ = c.wait_for_leaders(topic_name, 1)[0]
    follower = next(r for r in replicas if r != leader)
    os.kill(c.brokers[follower].pid, signal.SIGSTOP)
    try:
        offsets = confluent_produce(
            c.brokers[leader].bootstrap, topic_name, clients.numbered_records(3), 0, {"acks": 1}
        )
        assert offsets == [0, 1, 2]
        low, high = clients.watermarks(c.brokers[leader].bootstrap, topic_name, 0)
        assert (low, high) == (0, 0)
    finally:
        os.kill(c.brokers[follower].pid, signal.SIGCONT)
    c.wait_for(lambda: clients.watermarks(c.brokers[leader].bootstrap, topic_name, 0) == (0, 3),
               "the high watermark at 3 once the follower fetched")  # fmt: skip


def test_kill_9_of_the_leader_loses_and_duplicates_no_acknowledged_record(
    cluster_factory, topic_name: str
) -> None:
    c = cluster_factory()
    c.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    leader, _, _ = c.wait_for_leaders(topic_name, 1)[0]
    producer = Producer(
        {"bootstrap.servers": c.bootstrap, **ALL_ACKS, "linger.ms": 5, "message.timeout.ms": 60000}
    )
    acked: list[bytes] = []
    failed: list[object] = []

    def delivered(err, msg) -> None:
        (failed if err is not None else acked).append(err if err is not None else msg.value())

    sent = 0
    for _ in range(200):
        producer.produce(topic_name, str(sent).encode(), partition=0, on_delivery=delivered)
        sent += 1
    producer.flush(30)
    c.brokers[leader].kill()  # no flush, no checkpoint: the followers have what was acknowledged
    for _ in range(300):
        producer.produce(topic_name, str(sent).encode(), partition=0, on_delivery=delivered)
        sent += 1
        producer.poll(0)
    assert producer.flush(90) == 0
    assert not failed
    assert len(acked) == sent
    c.restart(leader)
    c.wait_for(lambda: sorted(c.partition_state(topic_name, 0)["isr"]) == [0, 1, 2], "the old leader in sync")
    c.wait_for(lambda: replicas_agree(cluster=c, topic=topic_name, partition=0, end=sent), "replicas agree")
    from tests.integration.conftest import confluent_consume

    values = [r.value for r in confluent_consume(c.bootstrap, topic_name, sent, 0)]
    assert sorted(values, key=int) == [
        str(i).encode() for i in range(sent)
    ]  # each once: nothing lost or doubled
    assert values == [str(i).encode() for i in range(sent)]  # and in order


def test_a_former_leader_truncates_what_the_new_leader_lacks(
    cluster_factory, clients, topic_name: str
) -> None:
    """The leader takes acks=1 writes its followers never fetch (they are paused), then dies; a follower is
    elected and takes other writes. Back, the former leader drops its unreplicated records (its first fetch names
    the epoch of its last batch; the new leader answers with the DivergingEpoch to truncate from, Kafka 2.7+) and
    ends byte for byte like the others."""
    c = cluster_factory(replica_lag_time_max_ms="600000")
    c.create_topic(topic_name, 1, 3)
    leader, replicas, _ = c.wait_for_leaders(topic_name, 1)[0]
    followers = [r for r in replicas if r != leader]
    committed, new = clients.numbered_records(10, b"committed"), clients.numbered_records(7, b"new")
    lost = clients.numbered_records(5, b"lost")
    confluent_produce(c.bootstrap, topic_name, committed, 0, ALL_ACKS)
    c.wait_for(lambda: replicas_agree(c, topic_name, 0, 10), "the first records everywhere")
    for f in followers:
        os.kill(c.brokers[f].pid, signal.SIGSTOP)
    try:
        # A paused follower may still have a fetch parked at the leader: this record completes it (the follower
        # may or may not get it), so that the next records reach no follower.
        flush = clients.numbered_records(1, b"flush")
        confluent_produce(c.brokers[leader].bootstrap, topic_name, flush, 0, {"acks": 1})
        offsets = confluent_produce(c.brokers[leader].bootstrap, topic_name, lost, 0, {"acks": 1})
        assert offsets == list(range(11, 16))
        c.brokers[leader].kill()
    finally:
        for f in followers:
            os.kill(c.brokers[f].pid, signal.SIGCONT)
    survivors = set(followers)
    new_leader, _, _ = c.wait_for_leaders(topic_name, 1, survivors)[0]
    assert new_leader in survivors
    confluent_produce(c.brokers[new_leader].bootstrap, topic_name, new, 0, ALL_ACKS)
    kept = log_end(replica_logs(c, topic_name, 0)[new_leader])  # 17, or 18 with the flush record
    c.restart(leader)
    c.wait_for(lambda: replicas_agree(c, topic_name, 0, kept), "the former leader truncated and caught up")
    values = [r.value for r in clients.consume("confluent", c.bootstrap, topic_name, kept, 0)]
    expected = committed + (flush if kept == 18 else []) + new
    assert values == [r.value for r in expected]  # none of the unreplicated records
    former_leader_log = c.brokers[leader].log_text()
    assert f"{topic_name}-0: the leader's log diverges after epoch 0 at offset {kept - 7}" in former_leader_log
    assert f"{topic_name}-0: truncating from 16 to {kept - 7}" in former_leader_log


def test_a_broker_that_led_an_epoch_without_writing_follows_the_next_leader(
    cluster_factory, clients, topic_name: str
) -> None:
    """Leadership goes from A to B (controlled shutdown of A) and back to A (preferred election) with nothing
    written in between. B's epoch cache ends with the epoch it led, which A never had: A's first answer is a
    DivergingEpoch at B's log end, and B must drop that epoch (Kafka's truncateTo at the log end) rather than name
    it again in every fetch, never replicating anything more."""
    c = cluster_factory()
    c.create_topic(topic_name, 1, 3)
    first, _, _ = c.wait_for_leaders(topic_name, 1)[0]
    confluent_produce(c.bootstrap, topic_name, clients.numbered_records(5, b"before"), 0, ALL_ACKS)
    c.wait_for(lambda: replicas_agree(c, topic_name, 0, 5), "the first records everywhere")
    assert c.brokers[first].stop() == 0
    second = c.partition_state(topic_name, 0)["leader"]
    assert second not in (first, -1)
    c.restart(first)
    c.wait_for(lambda: first in c.partition_state(topic_name, 0)["isr"], "the first leader back in the ISR")
    run_tool(leader_election, "--bootstrap-server", c.bootstrap, "--election-type", "preferred", "--topic",
             topic_name, "--partition", "0")  # fmt: skip
    c.wait_for(lambda: c.partition_state(topic_name, 0)["leader"] == first, "the first leader leading again")
    confluent_produce(c.bootstrap, topic_name, clients.numbered_records(5, b"after"), 0, ALL_ACKS)
    c.wait_for(lambda: replicas_agree(c, topic_name, 0, 10), "every replica, the second leader's too, with the "
               "records written after the leadership came back")  # fmt: skip
    c.wait_for(lambda: sorted(c.partition_state(topic_name, 0)["isr"]) == sorted(c.brokers), "every replica in sync")


def test_high_watermarks_are_checkpointed_on_every_replica(cluster_factory, topic_name: str) -> None:
    c = cluster_factory(log_flush_offset_checkpoint_interval_ms="200")
    c.create_topic(topic_name, 1, 3)
    c.wait_for_leaders(topic_name, 1)
    producer = Producer({"bootstrap.servers": c.bootstrap, **ALL_ACKS})
    for i in range(25):
        producer.produce(topic_name, str(i).encode(), partition=0)
    assert producer.flush(30) == 0

    def checkpointed(broker_id: int) -> int | None:
        path = c.brokers[broker_id].log_dir / "replication-offset-checkpoint"
        lines = path.read_text().splitlines() if path.exists() else []
        found = [int(line.split()[2]) for line in lines[2:] if line.split()[:2] == [topic_name, "0"]]
        return found[0] if found else None

    # followers learn the high watermark from their fetches, and checkpoint it as the leader does
    c.wait_for(lambda: all(checkpointed(b) == 25 for b in c.brokers), "the high watermark 25 checkpointed")
    victim = next(b for b in c.brokers if b != c.partition_state(topic_name, 0)["leader"])
    c.brokers[victim].kill()
    c.restart(victim)
    assert checkpointed(victim) == 25  # still there after the kill -9 and the restart
    c.wait_for(
        lambda: victim in c.partition_state(topic_name, 0)["isr"], "the restarted follower back in sync"
    )


def test_a_reassignment_adding_a_replica_completes_while_producers_write(
    cluster_factory, clients, topic_name: str
) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition

    c = cluster_factory()
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        from kafka.admin import NewTopic as PyNewTopic

        admin.create_topics([PyNewTopic(topic_name, -1, -1, replica_assignments={0: [0, 1]})])
        c.wait_for_leaders(topic_name, 1)
        before = clients.numbered_records(300, b"before")
        confluent_produce(c.bootstrap, topic_name, before, 0, ALL_ACKS)
        admin.alter_partition_reassignments({TopicPartition(topic_name, 0): [1, 2]})
        during = clients.numbered_records(100, b"during")
        confluent_produce(c.bootstrap, topic_name, during, 0, ALL_ACKS)
        c.wait_for(
            lambda: (
                c.znode(f"/brokers/topics/{topic_name}")["partitions"]["0"] == [1, 2]
                and not admin.list_partition_reassignments()
            ),
            "the move done",
        )
        assert c.znode(f"/brokers/topics/{topic_name}").get("adding_replicas", {}) == {}
        assert sorted(c.partition_state(topic_name, 0)["isr"]) == [1, 2]
        c.wait_for(lambda: not (c.brokers[0].log_dir / f"{topic_name}-0").exists(), "the old replica deleted")
    finally:
        admin.close()
    c.wait_for(lambda: replicas_agree(c, topic_name, 0, 400), "both replicas with every record")
    got = clients.consume("confluent", c.bootstrap, topic_name, 400, 0)
    assert [r.value for r in got] == [r.value for r in before + during]


def test_a_replication_throttle_bounds_the_copy_rate(cluster_factory, clients, topic_name: str) -> None:
    """A new replica copies 1 MB through a 100 kB/s throttle (leader and follower side), in fetches of at most
    64 kB: the copy's average rate stays near the throttle (under twice it), where unthrottled it takes a
    fraction of a second."""
    import time

    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import TopicPartition

    rate = 100_000
    c = cluster_factory(
        leader_replication_throttled_rate=str(rate), follower_replication_throttled_rate=str(rate),
        replica_fetch_max_bytes="65536", replication_quota_window_num="2",
    )  # fmt: skip
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        admin.create_topics([NewTopic(topic_name, -1, -1, replica_assignments={0: [0]}, topic_configs={
            "leader.replication.throttled.replicas": "*", "follower.replication.throttled.replicas": "*",
        })])  # fmt: skip
        c.wait_for_leaders(topic_name, 1)
        producer = Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0})
        for _ in range(
            100
        ):  # one batch each: a fetch holds several, and the throttle can work batch by batch
            producer.produce(topic_name, os.urandom(10_000), partition=0)
            assert producer.flush(30) == 0
        size = len(log_bytes(c.brokers[0].log_dir / f"{topic_name}-0"))
        started = time.monotonic()
        admin.alter_partition_reassignments({TopicPartition(topic_name, 0): [0, 1]})
        c.wait_for(lambda: replicas_agree(c, topic_name, 0, 100), "the new replica copied", timeout=120)
        elapsed = time.monotonic() - started
        c.wait_for(lambda: not admin.list_partition_reassignments(), "the move done")
    finally:
        admin.close()
    assert size / elapsed < 2 * rate, f"{size} bytes copied in {elapsed:.1f}s through a {rate} B/s throttle"


def test_a_reassignment_replacing_a_dead_replica_completes(cluster_factory, clients, topic_name: str) -> None:
    """Self-healing's move: [0, 2] -> [0, 1] while broker 2 is dead; the new replica catches up, joins the ISR
    and the dead one is dropped."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as PyNewTopic
    from kafka.structs import TopicPartition

    c = cluster_factory()
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        admin.create_topics([PyNewTopic(topic_name, -1, -1, replica_assignments={0: [0, 2]})])
        c.wait_for_leaders(topic_name, 1)
        records = clients.numbered_records(300, b"r")
        confluent_produce(c.bootstrap, topic_name, records, 0, ALL_ACKS)
        os.kill(c.brokers[2].pid, signal.SIGKILL)
        c.wait_for(lambda: 2 not in c.registered(), "broker 2's session to expire")
        c.wait_for(lambda: c.partition_state(topic_name, 0)["isr"] == [0], "broker 2 out of the ISR")
        admin.alter_partition_reassignments({TopicPartition(topic_name, 0): [0, 1]})
        c.wait_for(
            lambda: (
                c.znode(f"/brokers/topics/{topic_name}")["partitions"]["0"] == [0, 1]
                and not admin.list_partition_reassignments()
            ),
            "the move done",
        )
        assert sorted(c.partition_state(topic_name, 0)["isr"]) == [0, 1]
    finally:
        admin.close()
    c.wait_for(lambda: replicas_agree(c, topic_name, 0, 300), "both replicas with every record")


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def consumer_fetch(broker, topic: str, leader_epoch: int, rack: str):
    """A consumer's Fetch v12 of partition 0 from offset 0 with its client.rack: (error name, preferred read
    replica, high watermark, records)."""
    request = fetch_v12.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, rack_id=rack, topics=(
            fetch_v12.FetchTopic(topic=topic, partitions=(fetch_v12.FetchPartition(
                partition=0, current_leader_epoch=leader_epoch, fetch_offset=0, partition_max_bytes=1 << 20,
            ),)),
        ), forgotten_topics_data=(),
    )  # fmt: skip
    with RawClient.to(broker) as raw:
        p = raw.call(request).responses[0].partitions[0]
    return ErrorCode(p.error_code).name, p.preferred_read_replica, p.high_watermark, p.records or b""


def test_a_consumer_fetches_from_the_in_sync_follower_of_its_rack(cluster_factory, clients, topic_name: str) -> None:
    """KIP-392: with the rack-aware replica.selector.class the leader sends a consumer in a follower's rack to that
    follower, which serves it up to its own high watermark; a real client in that rack reads everything."""
    c = cluster_factory(
        replica_selector_class=RACK_AWARE_SELECTOR, odradek_metrics_listener="http://127.0.0.1:0",
        per_broker={b: {"broker.rack": f"rack-{b}"} for b in range(3)},
    )  # fmt: skip
    c.create_topic(topic_name, 1, 3)
    leader, replicas, _ = c.wait_for_leaders(topic_name, 1)[0]
    follower = next(r for r in replicas if r != leader)
    records = clients.numbered_records(50)
    confluent_produce(c.bootstrap, topic_name, records, 0, ALL_ACKS)
    epoch = c.partition_state(topic_name, 0)["leader_epoch"]

    error, preferred, _, data = consumer_fetch(c.brokers[leader], topic_name, epoch, f"rack-{follower}")
    assert (error, preferred, data) == ("none", follower, b"")
    for rack in (f"rack-{leader}", ""):  # the leader's own rack, or none: read from the leader
        error, preferred, high_watermark, data = consumer_fetch(c.brokers[leader], topic_name, epoch, rack)
        assert (error, preferred, high_watermark) == ("none", -1, 50) and data
    # the follower answers a consumer once its fetches brought it the high watermark
    c.wait_for(
        lambda: consumer_fetch(c.brokers[follower], topic_name, epoch, f"rack-{follower}")[2] == 50,
        "the follower's high watermark at 50",
    )
    error, preferred, _, data = consumer_fetch(c.brokers[follower], topic_name, epoch, f"rack-{follower}")
    assert (error, preferred) == ("none", -1) and data
    # librdkafka in the follower's rack reads all of it, from the follower (which sends no bytes to anyone else)
    follower_bytes_out = bytes_out(c.brokers[follower], topic_name)
    got = confluent_consume(c.bootstrap, topic_name, 50, 0, config={"client.rack": f"rack-{follower}"})
    assert clients.contents(got) == clients.contents(records)
    assert bytes_out(c.brokers[follower], topic_name) >= follower_bytes_out + sum(len(r.value) for r in records)


def bytes_out(broker, topic: str) -> float:
    from tests.integration.cluster.test_cluster_metrics import metrics_port
    from tests.integration.test_broker_metrics import scrape

    samples = scrape(metrics_port(broker))
    return samples.get(("kafka_server_brokertopicmetrics_bytesout_total", (("topic", topic),)), 0.0)
