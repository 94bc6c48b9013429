"""Storage faults against a live broker: a disk that fills up, corruption at rest, a lost metadata update, and
deleting large topics while clients keep talking to the broker.

Disk full is real: the log dir is a small tmpfs (mounting needs root, as in CI; the test is skipped where the
mount is refused), grown afterwards with `mount -o remount,size=`, as an operator frees space.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import select
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.odradek_only

NONE, CORRUPT_MESSAGE, LEADER_NOT_AVAILABLE, KAFKA_STORAGE_ERROR = 0, 2, 5, 56
DEADLINE_S = 60


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(size)``: a fresh tmpfs of that size; ``grow(path, size)`` remounts it bigger."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here (needs root): {result.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _grow(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def _batch(clients, raw, index: int, size: int = 8000) -> bytes:
    return raw.build_batch([clients.Rec(b"k%d" % index, bytes([index % 251]) * size)])


def _produce(client, raw, topic: str, partition: int, batch: bytes) -> tuple[int, int]:
    return raw.produce_result(client.call(raw.produce(topic, partition, batch, acks=-1)))


def _fill(broker, clients, raw, topic: str, partition: int) -> tuple[list[tuple[int, bytes]], int | None]:
    """Produce 8 KB batches until one fails: (acknowledged (offset, batch) pairs, the failure's error code or
    None when the broker closed the connection instead of answering)."""
    acknowledged: list[tuple[int, bytes]] = []
    with raw.RawClient.to(broker) as client:
        for i in range(100_000):
            batch = _batch(clients, raw, i)
            try:
                error, offset = _produce(client, raw, topic, partition, batch)
            except (ConnectionError, OSError):
                return acknowledged, None
            if error != NONE:
                return acknowledged, error
            acknowledged.append((offset, batch))
    raise AssertionError("the disk never filled up")


def _fetch_all(broker, raw, topic: str, partition: int, end: int) -> list[dict]:
    batches: list[dict] = []
    offset = 0
    with raw.RawClient.to(broker) as client:
        while offset < end:
            error, _, records = raw.fetch_result(client.call(raw.fetch(topic, partition, offset)))
            assert error == NONE, f"fetch at {offset} answered error {error}"
            got = raw.parse_batches(records)
            assert got, f"nothing at offset {offset}"
            batches.extend(got)
            offset = got[-1]["records"][-1].offset + 1
    return batches


def _wait_for_exit(broker) -> int:
    deadline = time.monotonic() + DEADLINE_S
    while broker.proc.poll() is None:
        assert time.monotonic() < deadline, "the broker did not halt"
        time.sleep(0.05)
    return broker.proc.returncode


def _values(batches: list[dict]) -> list[tuple[int, bytes]]:
    return [(b["base_offset"], b["records"][0].value) for b in batches]


def _expected(raw, acknowledged: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    return [(offset, raw.parse_batches(batch)[0]["records"][0].value) for offset, batch in acknowledged]


def test_disk_full_on_the_only_log_dir_halts_and_loses_no_acknowledged_record(
    broker_factory, small_disk, raw, clients, helpers
):
    disk = small_disk("2m")
    broker = broker_factory(overrides={"log.dirs": str(disk)})
    topic = clients.create_topic(broker.bootstrap, helpers.make_topic_name("full"), 1)

    acknowledged, error = _fill(broker, clients, raw, topic, 0)

    assert acknowledged and error in (KAFKA_STORAGE_ERROR, None)  # the broker may halt before answering
    assert _wait_for_exit(broker) == 1
    assert "halting broker" in broker.log_text()
    _grow(disk, "64m")
    broker.start()
    stored = _fetch_all(broker, raw, topic, 0, acknowledged[-1][0] + 1)
    expected = _expected(raw, acknowledged)
    assert _values(stored)[: len(expected)] == expected
    assert len(stored) <= len(expected) + 1  # at most the batch whose answer was lost to the halt
    with raw.RawClient.to(broker) as client:
        error, offset = _produce(client, raw, topic, 0, _batch(clients, raw, 0, 10))
    assert (error, offset) == (NONE, stored[-1]["base_offset"] + 1)


def test_disk_full_on_one_of_two_log_dirs_takes_only_that_dir_offline(
    broker_factory, small_disk, raw, clients, helpers, tmp_path
):
    disk = small_disk("2m")
    roomy = tmp_path / "roomy"
    broker = broker_factory(overrides={"log.dirs": f"{roomy},{disk}"})
    topic = clients.create_topic(broker.bootstrap, helpers.make_topic_name("half-full"), 2)
    assert (roomy / f"{topic}-0").is_dir() and (disk / f"{topic}-1").is_dir()

    acknowledged, error = _fill(broker, clients, raw, topic, 1)

    assert acknowledged and error == KAFKA_STORAGE_ERROR
    with raw.RawClient.to(broker) as client:
        assert _produce(client, raw, topic, 1, _batch(clients, raw, 1, 10))[0] == KAFKA_STORAGE_ERROR
        assert raw.fetch_result(client.call(raw.fetch(topic, 1, 0)))[0] == KAFKA_STORAGE_ERROR
        assert _produce(client, raw, topic, 0, _batch(clients, raw, 2, 10)) == (
            NONE,
            0,
        )  # the other dir serves on
        (meta_topic,) = client.call(raw.metadata([topic])).topics
        offline = next(p for p in meta_topic.partitions if p.partition_index == 1)
        assert (offline.error_code, offline.leader_id, list(offline.offline_replicas)) == (
            LEADER_NOT_AVAILABLE,
            -1,
            [0],
        )
        dirs = {r.log_dir: r.error_code for r in client.call(_describe_log_dirs()).results}
        assert dirs == {str(roomy): NONE, str(disk): KAFKA_STORAGE_ERROR}
    assert "log dir " + str(disk) + " failed" in broker.log_text()

    _grow(disk, "64m")
    broker.restart()  # SIGTERM exits 0: the live dir shuts down cleanly, the failed one is recovered
    stored = _fetch_all(broker, raw, topic, 1, acknowledged[-1][0] + 1)
    assert _values(stored) == _expected(raw, acknowledged)
    assert len(_fetch_all(broker, raw, topic, 0, 1)) == 1


def _describe_log_dirs():
    from kio.index import load_request_schema

    return load_request_schema(35, 1)(topics=None)


def test_a_flipped_byte_at_rest_answers_corrupt_message(broker_factory, raw, clients, helpers):
    broker = broker_factory()
    topic = clients.create_topic(broker.bootstrap, helpers.make_topic_name("rot"), 1)
    with raw.RawClient.to(broker) as client:
        for i in range(3):
            assert _produce(client, raw, topic, 0, _batch(clients, raw, i, 1000))[0] == NONE
    broker.stop()
    segment = broker.log_dir / f"{topic}-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    second = len(data) // 3
    data[second + 500] ^= 0x01  # inside the second batch's record value
    segment.write_bytes(bytes(data))
    broker.start()
    with raw.RawClient.to(broker) as client:
        error, _, records = raw.fetch_result(client.call(raw.fetch(topic, 0, 0)))
        assert error == NONE and [b["base_offset"] for b in raw.parse_batches(records)] == [0]
        assert raw.fetch_result(client.call(raw.fetch(topic, 0, 1)))[0] == CORRUPT_MESSAGE
        assert raw.fetch_result(client.call(raw.fetch(topic, 0, 2)))[0] == NONE
    assert "CRC mismatch" in broker.log_text()


def test_a_log_the_metadata_does_not_know_is_kept_aside_not_deleted(broker_factory, raw, clients, helpers):
    """A power cut could lose a metadata update the log dir already reflects; start-up used to delete such logs.
    Only the logs of a topic whose deletion the metadata recorded are deleted (the deletion resumes)."""
    broker = broker_factory()
    unknown, deleting = (clients.create_topic(broker.bootstrap, helpers.make_topic_name(n), 1) for n in "ud")
    with raw.RawClient.to(broker) as client:
        for topic in (unknown, deleting):
            assert _produce(client, raw, topic, 0, _batch(clients, raw, 7, 100)) == (NONE, 0)
    broker.stop()
    metadata_file = broker.log_dir / "odradek-metadata.json"
    metadata = json.loads(metadata_file.read_text())
    metadata["deleting_topic_ids"] = [t["topic_id"] for t in metadata["topics"] if t["name"] == deleting]
    metadata["topics"] = [t for t in metadata["topics"] if t["name"] not in (unknown, deleting)]
    metadata_file.write_text(json.dumps(metadata))
    broker.start()
    names = [p.name for p in broker.log_dir.iterdir()]
    strays = [broker.log_dir / n for n in names if n.startswith(f"{unknown}-0.") and n.endswith("-stray")]
    assert len(strays) == 1
    assert (strays[0] / "00000000000000000000.log").stat().st_size > 100
    assert "kept aside as" in broker.log_text()
    assert [n for n in names if n.startswith(f"{deleting}-") and not n.endswith("-delete")] == []
    broker.restart()  # kept aside for good: not loaded, not deleted
    assert strays[0].is_dir()
    assert json.loads(metadata_file.read_text())["deleting_topic_ids"] == []


def _answered_meanwhile(broker, raw, client, request) -> object:
    """Send `request` on a connection of its own, check that ApiVersions on `client` is answered while its answer
    is still pending (event-driven: impossible when the work runs on the event loop), then return its answer."""
    slow = raw.RawClient.to(broker, timeout=DEADLINE_S * 5)
    with contextlib.closing(slow.sock):
        slow.send(request)
        assert client.call(raw.api_versions()).error_code == NONE
        assert select.select([slow.sock], [], [], 0)[0] == [], (
            "the broker answered ApiVersions only afterwards"
        )
        return slow.recv(request)[1]


def test_the_broker_answers_while_it_creates_and_deletes_large_topics(broker_factory, raw, helpers):
    """Deleting two 5,000-partition topics froze the broker for minutes (a checkpoint rewrite and fsync per
    partition, on the event loop)."""
    broker = broker_factory()
    topics = [helpers.make_topic_name("wide") for _ in range(2)]
    with raw.RawClient.to(broker, timeout=DEADLINE_S * 5) as client:
        (created,) = client.call(_create_topic(topics[0], 1000)).topics
        assert created.error_code == NONE
        (created,) = _answered_meanwhile(broker, raw, client, _create_topic(topics[1], 1000)).topics
        assert created.error_code == NONE
        deleted = _answered_meanwhile(broker, raw, client, _delete_topics(topics))
        assert [r.error_code for r in deleted.responses] == [NONE, NONE]
    assert not [
        p
        for p in broker.log_dir.iterdir()
        if p.name.startswith(tuple(f"{t}-" for t in topics)) and not p.name.endswith("-delete")
    ]


def _create_topic(name: str, partitions: int):
    from kio.index import load_entity_module, load_request_schema
    from kio.static.constants import EntityType
    from kio.static.primitive import i16, i32, i32Timedelta

    mod = load_entity_module("create_topics", 4, EntityType.request)
    return load_request_schema(19, 4)(
        topics=(
            mod.CreatableTopic(
                name=name,
                num_partitions=i32(partitions),
                replication_factor=i16(1),
                assignments=(),
                configs=(),
            ),
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(minutes=5)),
    )


def _delete_topics(names: list[str]):
    from kio.index import load_request_schema
    from kio.static.primitive import i32Timedelta

    return load_request_schema(20, 4)(
        topic_names=tuple(names), timeout=i32Timedelta.parse(datetime.timedelta(minutes=5))
    )
