"""Exactly-once read-process-write with real clients (confluent-kafka, kafka-python): a processor
(`txn_processor.py`, its own process) reads an input topic and writes an output topic and the consumed offsets in
one transaction per batch; it is killed with SIGKILL in the middle of a transaction whose records already reached
the log, and restarted with the same transactional id. The output, read with read_committed, must hold every
input exactly once: the restarted producer fenced the dead one, its open transaction was aborted, and the
consumed offsets committed with the last committed transaction are where the restarted processor resumes."""

from __future__ import annotations

import pytest
from txn_harness import check_exactly_once_across_a_killed_processor, new_topic

EOS_BROKER_OVERRIDES = {
    "num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def _eos_broker_process(broker_logs_dir, helpers):
    with helpers.running_broker(broker_logs_dir, "exactly-once", EOS_BROKER_OVERRIDES) as broker:
        yield broker


@pytest.fixture
def eos_broker(request, _eos_broker_process, helpers):
    return helpers.live_broker(request, _eos_broker_process)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_exactly_once_read_process_write_across_a_killed_processor(
    client, eos_broker, clients, tmp_path
) -> None:
    bootstrap = eos_broker.bootstrap
    check_exactly_once_across_a_killed_processor(
        client,
        bootstrap,
        new_topic(clients, bootstrap, "eos"),
        new_topic(clients, bootstrap, "eos"),
        clients,
        tmp_path,
    )
