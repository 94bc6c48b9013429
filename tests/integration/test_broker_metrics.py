"""The broker's Prometheus endpoint, scraped from a live broker after real clients produced and fetched."""

from __future__ import annotations

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
