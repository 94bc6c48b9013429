"""The broker's Prometheus endpoint, scraped from a live broker after real clients produced and fetched."""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port
from tests.integration.conftest import (
    confluent_consume,
    confluent_produce,
    create_topic,
    numbered_records,
    watermarks,
)

pytestmark = pytest.mark.odradek_only


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def requests_of(samples, api: str) -> float:
    return sum(
        v for (name, labels), v in samples.items()
        if name == "kafka_network_requestmetrics_requests_total" and dict(labels).get("request") == api
    )  # fmt: skip


def test_metrics_count_what_clients_produced_and_fetched(broker_factory, topic_name):
    port = free_port()
    broker = broker_factory(overrides={"odradek.metrics.listener": f"http://127.0.0.1:{port}"})
    create_topic(broker.bootstrap, topic_name, partitions=2)
    before = scrape(port)
    assert requests_of(before, "Produce") == 0

    records = numbered_records(30)
    confluent_produce(broker.bootstrap, topic_name, records[:20], partition=0)
    confluent_produce(broker.bootstrap, topic_name, records[20:], partition=1)
    for partition, count in ((0, 20), (1, 10)):
        assert len(confluent_consume(broker.bootstrap, topic_name, count, partition=partition)) == count

    after = scrape(port)
    topic = (("topic", topic_name),)
    assert after["kafka_server_brokertopicmetrics_messagesin_total", topic] == 30
    assert after["kafka_server_brokertopicmetrics_messagesin_total", ()] >= 30
    bytes_in = after["kafka_server_brokertopicmetrics_bytesin_total", topic]
    log_sizes = [after["kafka_log_log_size", (("partition", str(p)), *topic)] for p in (0, 1)]
    # Every produced byte is a record batch that lands in the log unchanged (no recompression configured).
    assert bytes_in == sum(log_sizes) > 0
    assert after["kafka_server_brokertopicmetrics_bytesout_total", topic] >= bytes_in
    for p, count in ((0, 20), (1, 10)):
        assert after["kafka_log_log_logendoffset", (("partition", str(p)), *topic)] == count
        assert watermarks(broker.bootstrap, topic_name, p)[1] == count
    assert requests_of(after, "Produce") >= 2
    assert requests_of(after, "Fetch") > requests_of(before, "Fetch")
    produce_latency = after[
        "kafka_network_requestmetrics_totaltimems_seconds_count", (("request", "Produce"),)
    ]
    assert produce_latency == requests_of(after, "Produce")
    assert after["kafka_server_replicamanager_partitioncount", ()] >= 2
    assert after["kafka_server_replicamanager_leadercount", ()] >= 2
    assert after["kafka_server_replicamanager_underreplicatedpartitions", ()] == 0
    assert after["kafka_controller_kafkacontroller_activecontrollercount", ()] == 1
    assert after["kafka_controller_kafkacontroller_offlinepartitionscount", ()] == 0
    assert after["kafka_coordinator_group_groupmetadatamanager_numgroups", (("state", "Empty"),)] >= 1
    assert after["process_resident_memory_bytes", ()] > 0

    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    assert missing.value.code == 404


def test_malformed_metrics_listener_is_refused_naming_the_key(broker_factory):
    broker = broker_factory(overrides={"odradek.metrics.listener": "127.0.0.1:9644"}, start=False)
    with pytest.raises(RuntimeError, match="during start-up"):
        broker.start()
    assert (
        "odradek.metrics.listener: '127.0.0.1:9644' is not of the form http://host:port" in broker.log_text()
    )


def test_transaction_coordinator_gauges_follow_a_transaction(broker_factory, topic_name):
    from confluent_kafka import Producer

    port = free_port()
    broker = broker_factory(
        overrides={
            "odradek.metrics.listener": f"http://127.0.0.1:{port}",
            "transaction.state.log.num.partitions": "1",
        }
    )
    create_topic(broker.bootstrap, topic_name, partitions=1)
    assert not any(name == "odradek_transaction_coordinator_transactions" for name, _ in scrape(port))

    def states() -> dict[str, float]:
        samples = scrape(port)
        return {
            dict(labels)["state"]: value
            for (name, labels), value in samples.items()
            if name == "odradek_transaction_coordinator_transactions" and value
        } | {
            "pending markers": samples["odradek_transaction_coordinator_pending_markers", ()],
            "retries": samples[
                "kafka_coordinator_transaction_transactionmarkerchannelmanager_logappendretryqueuesize", ()
            ],
        }

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic_name}"})
    producer.init_transactions(30)
    assert states() == {"Empty": 1, "pending markers": 0, "retries": 0}
    producer.begin_transaction()
    producer.produce(topic_name, b"inside")
    assert producer.flush(30) == 0
    assert states() == {"Ongoing": 1, "pending markers": 0, "retries": 0}
    producer.commit_transaction(30)
    # EndTxn is answered once PrepareCommit is written; the markers and CompleteCommit follow.
    deadline = time.monotonic() + 30
    while (now := states()) != {"CompleteCommit": 1, "pending markers": 0, "retries": 0}:
        assert set(now) <= {"PrepareCommit", "CompleteCommit", "pending markers", "retries"}, now
        assert time.monotonic() < deadline, f"the transaction did not complete: {now}"
        time.sleep(0.05)


def test_coordinator_load_times_and_transaction_verifications_are_exported(broker_factory, topic_name):
    """The coordinators' internal topics are created on first use, so a fresh broker has loaded nothing yet (NaN,
    as Kafka's Max and Avg read without samples); a transactional producer makes both coordinators load, and its
    first append to a partition is verified with the transaction coordinator."""
    from confluent_kafka import Producer, TopicPartition

    port = free_port()
    broker = broker_factory(
        overrides={
            "odradek.metrics.listener": f"http://127.0.0.1:{port}",
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
        }
    )
    create_topic(broker.bootstrap, topic_name, partitions=2)
    load_times = [
        f"kafka_server_{group}_coordinator_metrics_partition_load_time_{stat}"
        for group in ("group", "transaction")
        for stat in ("max", "avg")
    ]
    verification = "kafka_server_addpartitionstotxnmanager_"
    before = scrape(port)
    assert all(math.isnan(before[name, ()]) for name in load_times)
    assert before[verification + "verificationtimems_count", ()] == 0
    unknown_destination = (
        "kafka_coordinator_transaction_transactionmarkerchannelmanager_unknowndestinationqueuesize"
    )
    assert before[unknown_destination, ()] == 0

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic_name}"})
    producer.init_transactions(30)  # loads __transaction_state-0
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(topic_name, b"inside", partition=partition)
    assert producer.flush(30) == 0
    # Offsets sent to the transaction load __consumer_offsets-0, and the commit is verified there too.
    metadata = _consumer_group_metadata(broker.bootstrap, f"group-{topic_name}")
    producer.send_offsets_to_transaction([TopicPartition(topic_name, 0, 1)], metadata, 30)
    producer.commit_transaction(30)

    after = scrape(port)
    for name in load_times:
        assert after[name, ()] >= 0, name
    # Two partitions in Produce, one offsets partition in TxnOffsetCommit: each verified once, none failed.
    assert after[verification + "verificationtimems_count", ()] == 3
    assert after[verification + "verificationtimems_bucket", (("le", "+Inf"),)] == 3
    assert after[verification + "verificationtimems_max", ()] >= 0
    assert after[verification + "verificationfailurerate_total", ()] == 0
    assert after[unknown_destination, ()] == 0


def _consumer_group_metadata(bootstrap: str, group_id: str):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()
