"""The consumer-groups command line (like kafka-consumer-groups) against a real broker and real consumers."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from group_harness import (
    committed_offsets,
    group_broker_fixture,  # noqa: F401  (fixture "group_broker")
    group_broker_process_fixture,  # noqa: F401  (fixture)
    members_fixture,  # noqa: F401  (fixture "members")
    produce_spread,
    settled,
    wait_until,
)

PARTITIONS = 3
REPO = Path(__file__).resolve().parents[2]


def cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker_runtime.tools.consumer_groups", "--bootstrap-server", bootstrap, *args],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def rows(output: str, first_column: str) -> list[list[str]]:
    """The data rows of the table whose header starts with `first_column`."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    start = next(i for i, cells in enumerate(lines) if cells[0] == first_column)
    return [cells for cells in lines[start + 1 :] if cells[0] != first_column]


@pytest.fixture
def active_group(group_broker, new_topic, members):
    """(bootstrap, topic, group, member): one confluent member consuming everything, all committed."""
    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    group = f"cli-{uuid.uuid4().hex[:8]}"
    produce_spread(bootstrap, topic, PARTITIONS, 10)
    member = members("confluent", bootstrap, group, topic)
    wait_until(lambda: settled([member], PARTITIONS), what="the member's assignment")
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 10),
               what="commits")  # fmt: skip
    return bootstrap, topic, group, member


def test_list_and_describe_an_active_group(active_group) -> None:
    bootstrap, topic, group, member = active_group
    listed = cli(bootstrap, "--list")
    assert listed.returncode == 0 and group in listed.stdout.split()
    by_state = cli(bootstrap, "--list", "--state", "stable")
    assert [group, "Stable"] in rows(by_state.stdout, "GROUP")
    assert group not in cli(bootstrap, "--list", "--state", "Empty").stdout

    produce_spread(bootstrap, topic, PARTITIONS, 0)  # nothing new: lag 0
    described = cli(bootstrap, "--describe", "--group", group)
    assert described.returncode == 0, described.stdout + described.stderr
    (member_id,) = member.member_ids()
    table = rows(described.stdout, "GROUP")
    assert sorted(r[2] for r in table) == [str(p) for p in range(PARTITIONS)]
    for r in table:
        assert r[:2] == [group, topic]
        assert r[3:6] == ["10", "10", "0"], r  # CURRENT-OFFSET LOG-END-OFFSET LAG
        assert r[6] == member_id and r[7] == "/127.0.0.1" and r[8] == "rdkafka"

    members_table = rows(
        cli(bootstrap, "--describe", "--group", group, "--members", "--verbose").stdout, "GROUP"
    )
    assert members_table == [[group, member_id, "/127.0.0.1", "rdkafka", str(PARTITIONS), f"{topic}(0,1,2)"]]
    plain = cli(bootstrap, "--describe", "--group", group, "--members")
    assert plain.returncode == 0, plain.stderr
    assert rows(plain.stdout, "GROUP") == [[group, member_id, "/127.0.0.1", "rdkafka", str(PARTITIONS)]]
    state_table = rows(cli(bootstrap, "--describe", "--group", group, "--state").stdout, "GROUP")
    assert state_table[0][-3:] == ["range", "Stable", "1"]

    missing = cli(bootstrap, "--describe", "--group", "no-such-group")
    assert (
        missing.returncode == 1 and "Error: Consumer group 'no-such-group' does not exist." in missing.stdout
    )


def test_reset_offsets_only_for_inactive_groups_and_dry_run_by_default(active_group) -> None:
    bootstrap, topic, group, member = active_group
    refused = cli(
        bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute"
    )
    assert refused.returncode == 1
    assert (f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state is "
            "Stable.") in refused.stdout  # fmt: skip
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 10)

    member.stop()
    described = cli(bootstrap, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in described.stderr
    assert {tuple(r[2:7]) for r in rows(described.stdout, "GROUP")} == {
        (str(p), "10", "10", "0", "-") for p in range(3)
    }

    dry = cli(bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest")
    assert (
        dry.returncode == 0
        and "WARN: No action will be performed as the --execute option is missing" in dry.stderr
    )
    assert rows(dry.stdout, "GROUP") == [[group, topic, str(p), "0"] for p in range(PARTITIONS)]
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 10)

    done = cli(
        bootstrap,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        f"{topic}:0,2",
        "--to-offset",
        "4",
        "--execute",
    )
    assert done.returncode == 0 and rows(done.stdout, "GROUP") == [
        [group, topic, "0", "4"],
        [group, topic, "2", "4"],
    ]
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == {0: 4, 1: 10, 2: 4}

    shifted = cli(
        bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", "-6", "--execute"
    )
    # 4-6 is below the log start: clamped to 0 with Kafka's warning; 10-6 = 4
    assert "New offset (-2) is lower than earliest offset for topic partition" in shifted.stderr
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == {0: 0, 1: 4, 2: 0}
    too_far = cli(
        bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "99", "--execute"
    )
    assert "New offset (99) is higher than latest offset for topic partition" in too_far.stderr
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 10)


def test_reset_by_time_export_and_plan_files(active_group, tmp_path) -> None:
    bootstrap, topic, group, member = active_group
    member.stop()
    before_second_batch = time.time()
    time.sleep(0.05)
    produce_spread(bootstrap, topic, PARTITIONS, 5, "later")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(before_second_batch))
    stamp += f".{int((before_second_batch % 1) * 1000):03d}"
    by_time = cli(
        bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-datetime", stamp, "--execute"
    )
    assert by_time.returncode == 0, by_time.stdout + by_time.stderr
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 10)
    old = cli(
        bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--by-duration", "P1D", "--execute"
    )
    assert old.returncode == 0
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 0)

    exported = cli(
        bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--dry-run", "--export"
    )
    assert exported.stdout.splitlines() == [f"{topic},{p},15" for p in range(PARTITIONS)]
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,7\n{topic},1,15\n")
    applied = cli(bootstrap, "--reset-offsets", "--group", group, "--from-file", str(plan), "--execute")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == {0: 7, 1: 15, 2: 0}
    current = cli(bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-current", "--dry-run")
    assert rows(current.stdout, "GROUP") == [
        [group, topic, "0", "7"],
        [group, topic, "1", "15"],
        [group, topic, "2", "0"],
    ]


def test_delete_offsets_and_groups(active_group) -> None:
    bootstrap, topic, group, member = active_group
    subscribed = cli(bootstrap, "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
    assert subscribed.returncode == 1
    assert "Encounter some partition level error" in subscribed.stdout
    assert "GROUP_SUBSCRIBED_TO_TOPIC" in subscribed.stdout
    refused = cli(bootstrap, "--delete", "--group", group)
    assert (
        refused.returncode == 1
        and f"* Group '{group}' could not be deleted due to: NON_EMPTY_GROUP" in refused.stdout
    )

    member.stop()
    deleted_offsets = cli(bootstrap, "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
    assert deleted_offsets.returncode == 0, deleted_offsets.stdout
    assert [topic, "0", "Successful"] in rows(deleted_offsets.stdout, "TOPIC")
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == {0: -1001, 1: 10, 2: 10}
    deleted = cli(bootstrap, "--delete", "--group", group)
    assert (
        deleted.returncode == 0
        and f"Deletion of requested consumer groups ('{group}') was successful." in deleted.stdout
    )
    assert group not in cli(bootstrap, "--list").stdout.split()
    again = cli(bootstrap, "--delete", "--group", group)
    assert again.returncode == 1 and "GROUP_ID_NOT_FOUND" in again.stdout


def test_a_misspelled_topic_is_an_error_and_is_not_created(group_broker, clients) -> None:
    """Partitions are resolved with DescribeTopics: a Metadata lookup would auto-create the topic."""
    bootstrap = group_broker.bootstrap
    missing = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    result = cli(bootstrap, "--reset-offsets", "--group", "nobody", "--topic", missing, "--to-earliest")
    assert result.returncode != 0
    assert f"Topic '{missing}' does not exist" in result.stdout + result.stderr
    topics = clients.confluent_admin(bootstrap).list_topics(timeout=10).topics
    assert missing not in topics
