"""The kafka-topics, kafka-reassign-partitions and kafka-leader-election look-alikes against a cluster of
broker processes: Kafka's flags, JSON formats and output."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from broker_runtime.tools import leader_election, reassign_partitions, topics
from broker_runtime.tools.reassign_partitions import BROKER_THROTTLES, TOPIC_THROTTLES

pytestmark = pytest.mark.odradek_only


def run(tool, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = tool.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_topics_create_describe_list_alter_delete(cluster, topic_name: str) -> None:
    bs = cluster.brokers[0].bootstrap
    code, out, _ = run(topics, "--bootstrap-server", bs, "--create", "--topic", topic_name, "--partitions", "3",
                       "--replication-factor", "2", "--config", "retention.ms=86400000")  # fmt: skip
    assert (code, out) == (0, f"Created topic {topic_name}.\n")
    code, out, _ = run(
        topics, "--bootstrap-server", bs, "--create", "--topic", topic_name, "--partitions", "1"
    )
    assert code == 1 and "already exists" in out and out.startswith("Error while executing topic command : ")
    assert run(topics, "--bootstrap-server", bs, "--create", "--topic", topic_name, "--if-not-exists")[0] == 0
    cluster.wait_for_leaders(topic_name, 3)
    code, out, _ = run(topics, "--bootstrap-server", bs, "--describe", "--topic", topic_name)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    assert re.fullmatch(rf"Topic: {topic_name}\tTopicId: [\w-]{{22}}\tPartitionCount: 3\tReplicationFactor: 2\t"
                        r"Configs: retention\.ms=86400000,segment\.bytes=1073741824", lines[0])  # fmt: skip
    for p, line in enumerate(lines[1:]):
        m = re.fullmatch(rf"\tTopic: {topic_name}\tPartition: {p}\tLeader: (\d)\tReplicas: (\d),(\d)\tIsr: ([\d,]+)"
                         r"\tElr: N/A\tLastKnownElr: N/A", line)  # fmt: skip
        assert m, line
        assert m.group(1) == m.group(2)
    code, out, _ = run(topics, "--bootstrap-server", bs, "--list", "--topic", topic_name[:10] + ".*")
    assert topic_name in out.split()
    assert (
        run(topics, "--bootstrap-server", bs, "--alter", "--topic", topic_name, "--partitions", "5")[0] == 0
    )
    cluster.wait_for_leaders(topic_name, 5)
    code, out, _ = run(
        topics, "--bootstrap-server", bs, "--describe", "--topic", topic_name, "--under-replicated-partitions"
    )
    assert (code, out) == (0, "")  # every replica is in sync on a fresh topic
    code, out, _ = run(
        topics,
        "--bootstrap-server",
        bs,
        "--create",
        "--topic",
        topic_name + "-x",
        "--replication-factor",
        "4",
    )
    assert code == 1 and "larger than available brokers" in out
    assert run(topics, "--bootstrap-server", bs, "--delete", "--topic", topic_name)[0] == 0
    cluster.wait_for(lambda: topic_name not in cluster.metadata(0).topics, "the topic deleted")
    code, out, _ = run(topics, "--bootstrap-server", bs, "--describe", "--topic", topic_name)
    assert code == 1 and f"Topic '{topic_name}' does not exist as expected" in out


def test_topics_reports_unavailable_partitions(cluster_factory, topic_name: str) -> None:
    c = cluster_factory()
    bs = c.brokers[0].bootstrap
    assert (
        run(
            topics, "--bootstrap-server", bs, "--create", "--topic", topic_name, "--replica-assignment", "1,2"
        )[0]
        == 0
    )
    c.wait_for_leaders(topic_name, 2)
    c.brokers[1].kill()
    c.wait_for(lambda: 1 not in c.registered(), "broker 1 gone")
    c.wait_for(lambda: c.metadata(0, [topic_name]).topics[topic_name].partitions[0].leader == -1, "no leader")
    code, out, _ = run(topics, "--bootstrap-server", bs, "--describe", "--unavailable-partitions")
    assert code == 0
    assert (
        out
        == f"\tTopic: {topic_name}\tPartition: 0\tLeader: none\tReplicas: 1\tIsr: 1\tElr: N/A\tLastKnownElr: N/A\n"
    )


def test_reassign_generate_execute_verify_list_cancel(cluster, topic_name: str, tmp_path) -> None:
    bs = cluster.brokers[0].bootstrap
    assert (
        run(
            topics,
            "--bootstrap-server",
            bs,
            "--create",
            "--topic",
            topic_name,
            "--replica-assignment",
            "0:1,1:2",
        )[0]
        == 0
    )
    cluster.wait_for_leaders(topic_name, 2)
    to_move = tmp_path / "topics.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic_name}]}))
    code, out, _ = run(reassign_partitions, "--bootstrap-server", bs, "--generate", "--topics-to-move-json-file",
                       str(to_move), "--broker-list", "0,2")  # fmt: skip
    assert code == 0
    current_text, proposed_text = out.split("\n\nProposed partition reassignment configuration\n")
    current = json.loads(current_text.removeprefix("Current partition replica assignment\n"))
    assert current == {"version": 1, "partitions": [
        {"topic": topic_name, "partition": 0, "replicas": [0, 1], "log_dirs": ["any", "any"]},
        {"topic": topic_name, "partition": 1, "replicas": [1, 2], "log_dirs": ["any", "any"]},
    ]}  # fmt: skip
    proposed = json.loads(proposed_text)
    assert all(sorted(e["replicas"]) == [0, 2] for e in proposed["partitions"])
    # a move that only drops and reorders in-sync replicas completes at once
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic_name, "partition": 0, "replicas": [1, 0]},
                    {"topic": topic_name, "partition": 1, "replicas": [2]},
                ],
            }
        )
    )
    code, out, _ = run(reassign_partitions, "--bootstrap-server", bs, "--execute", "--reassignment-json-file",
                       str(plan), "--throttle", "1000000")  # fmt: skip
    assert code == 0, out
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert "The inter-broker throttle limit was set to 1000000 B/s" in out
    assert out.rstrip().endswith(
        f"Successfully started partition reassignments for {topic_name}-0,{topic_name}-1"
    )
    cluster.wait_for(lambda: cluster.znode(f"/brokers/topics/{topic_name}")["partitions"] == {"0": [1, 0], "1": [2]},
                     "the moves done")  # fmt: skip
    code, out, _ = run(
        reassign_partitions, "--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(plan)
    )
    assert code == 0
    assert out.splitlines()[:3] == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic_name}-0 is completed.",
        f"Reassignment of partition {topic_name}-1 is completed.",
    ]
    assert "Clearing broker-level throttles on brokers 0,1,2" in out
    # a move that adds a replica stays in progress while its throttle (a byte a second) holds the copy back after
    # its first fetch (one batch of the three), and can be cancelled
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for _ in range(3):
        producer.produce(topic_name, b"x" * 700_000, partition=1)
        assert producer.flush(30) == 0
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic_name, "partition": 1, "replicas": [0]}]})
    )
    code, out, _ = run(reassign_partitions, "--bootstrap-server", bs, "--execute", "--reassignment-json-file",
                       str(plan), "--throttle", "1")  # fmt: skip
    assert code == 0 and "The inter-broker throttle limit was set to 1 B/s" in out
    assert cluster.znode(f"/config/topics/{topic_name}")["config"] == {
        "leader.replication.throttled.replicas": "1:2", "follower.replication.throttled.replicas": "1:0",
    }  # fmt: skip
    code, out, _ = run(reassign_partitions, "--bootstrap-server", bs, "--list")
    assert (
        out == f"Current partition reassignments:\n{topic_name}-1: replicas: 0,2. adding: 0. removing: 2.\n"
    )
    code, out, _ = run(
        reassign_partitions, "--bootstrap-server", bs, "--execute", "--reassignment-json-file", str(plan)
    )
    assert code == 1 and "Cannot execute because there is an existing partition assignment" in out
    code, out, _ = run(
        reassign_partitions, "--bootstrap-server", bs, "--verify", "--reassignment-json-file", str(plan)
    )
    assert f"Reassignment of partition {topic_name}-1 is still in progress." in out and "Clearing" not in out
    code, out, _ = run(
        reassign_partitions, "--bootstrap-server", bs, "--cancel", "--reassignment-json-file", str(plan)
    )
    assert code == 0 and f"Successfully cancelled partition reassignment for: {topic_name}-1" in out
    assert (
        run(reassign_partitions, "--bootstrap-server", bs, "--list")[1]
        == "No partition reassignments found.\n"
    )
    assert cluster.znode(f"/config/topics/{topic_name}")["config"] == {}


def test_leader_election_tool(cluster, topic_name: str, tmp_path) -> None:
    bs = cluster.brokers[0].bootstrap
    assert run(topics, "--bootstrap-server", bs, "--create", "--topic", topic_name, "--partitions", "2",
               "--replication-factor", "3")[0] == 0  # fmt: skip
    cluster.wait_for_leaders(topic_name, 2)
    code, out, _ = run(leader_election, "--bootstrap-server", bs, "--election-type", "preferred", "--topic", topic_name,
                       "--partition", "0")  # fmt: skip
    assert (code, out) == (0, f"Valid replica already elected for partitions {topic_name}-0\n")
    path = tmp_path / "election.json"
    path.write_text(
        json.dumps({"partitions": [{"topic": topic_name, "partition": 1}, {"topic": "nope", "partition": 0}]})
    )
    code, out, err = run(leader_election, "--bootstrap-server", bs, "--election-type", "preferred", "--path-to-json-file",
                         str(path))  # fmt: skip
    assert code == 1
    assert f"Valid replica already elected for partitions {topic_name}-1" in out
    assert (
        "Error completing leader election (PREFERRED) for partition: nope-0: UNKNOWN_TOPIC_OR_PARTITION"
        in out
    )
    assert "1 replica(s) could not be elected" in err
    code, _, err = run(leader_election, "--bootstrap-server", bs, "--election-type", "unclean")
    assert code == 1 and "One and only one of the following options is required" in err
    code, out, _ = run(
        leader_election, "--bootstrap-server", bs, "--election-type", "unclean", "--all-topic-partitions"
    )
    assert (code, out) == (0, "")  # every partition has a live leader


def test_reassign_verify_clears_the_throttles_when_its_reader_has_gone(
    cluster, topic_name: str, tmp_path
) -> None:
    """`--verify | head -1`: what it prints past the first line has nowhere to go; it clears the throttles all the
    same and exits as it would (Kafka's tools print through a PrintStream, which drops what it cannot write)."""
    bs = cluster.brokers[0].bootstrap
    code, out, _ = run(topics, "--bootstrap-server", bs, "--create", "--topic", topic_name,
                       "--replica-assignment", "0")  # fmt: skip
    assert code == 0, out
    cluster.wait_for_leaders(topic_name, 1)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic_name, "partition": 0, "replicas": [1]}]})
    )
    code, out, _ = run(reassign_partitions, "--bootstrap-server", bs, "--execute", "--reassignment-json-file",
                       str(plan), "--throttle", "1000000")  # fmt: skip
    assert code == 0, out
    cluster.wait_for(lambda: cluster.znode(f"/brokers/topics/{topic_name}")["partitions"] == {"0": [1]},
                     "the move done")  # fmt: skip

    def throttles() -> list[str]:
        configs = [cluster.znode(f"/config/brokers/{b}") for b in (0, 1, 2)]
        configs.append(cluster.znode(f"/config/topics/{topic_name}"))
        return sorted(key for c in configs if c for key in c["config"] if "throttled" in key)

    assert throttles() == sorted(BROKER_THROTTLES * 2 + TOPIC_THROTTLES)  # brokers 0 and 1, and the topic
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    try:
        done = subprocess.run([sys.executable, "-m", "broker_runtime.tools.reassign_partitions", "--bootstrap-server",
                               bs, "--verify", "--reassignment-json-file", str(plan)],
                              stdout=write_fd, stderr=subprocess.PIPE, timeout=120)  # fmt: skip
    finally:
        os.close(write_fd)
    assert (done.returncode, done.stderr.decode()) == (0, "")
    assert throttles() == []
