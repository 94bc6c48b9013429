"""Exactly-once read-process-write with real clients (confluent-kafka, kafka-python): a processor
(`txn_processor.py`, its own process) reads an input topic and writes an output topic and the consumed offsets in
one transaction per batch; it is killed with SIGKILL in the middle of a transaction whose records already reached
the log, and restarted with the same transactional id. The output, read with read_committed, must hold every
input exactly once: the restarted producer fenced the dead one, its open transaction was aborted, and the
consumed offsets committed with the last committed transaction are where the restarted processor resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from txn_harness import read_all

HERE = Path(__file__).resolve().parent
PROCESSOR = HERE / "txn_processor.py"

EOS_BROKER_OVERRIDES = {
    "num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def _eos_broker_process(broker_logs_dir, helpers):
    broker = helpers.new_broker(broker_logs_dir, "exactly-once", EOS_BROKER_OVERRIDES)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def eos_broker(request, _eos_broker_process, helpers):
    broker = _eos_broker_process
    helpers.remember_broker(request, broker)
    if not broker.alive:
        broker.start()
    return broker


def new_topic(clients, bootstrap: str, partitions: int = 3) -> str:
    name = f"eos-{uuid.uuid4().hex[:10]}"
    clients.create_topic(bootstrap, name, partitions)
    return name


def start_processor(client: str, bootstrap: str, input_topic: str, output_topic: str, group: str, tid: str,
                    log_path: Path, crash_after: int | None = None) -> subprocess.Popen:  # fmt: skip
    args = [sys.executable, str(PROCESSOR), client, bootstrap, input_topic, output_topic, group, tid, "10"]
    if crash_after is not None:
        args.append(str(crash_after))
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=open(log_path, "ab"), text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def wait_for_line(proc: subprocess.Popen, wanted: str, log_path: Path) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:  # the processor prints one line per milestone; a dead one ends the stream
        if line.strip() == wanted:
            return
    proc.wait()
    raise AssertionError(
        f"processor exited {proc.returncode} before {wanted}:\n{log_path.read_text()[-4000:]}"
    )


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_exactly_once_read_process_write_across_a_killed_processor(
    client, eos_broker, clients, tmp_path
) -> None:
    bootstrap = eos_broker.bootstrap
    input_topic, output_topic = new_topic(clients, bootstrap), new_topic(clients, bootstrap)
    inputs = [clients.Rec(f"k{i}".encode(), f"v{i}".encode(), (), None, None, None) for i in range(90)]
    for p in range(3):
        clients.confluent_produce(bootstrap, input_topic, inputs[p * 30 : (p + 1) * 30], p)
    group, tid = f"eos-{uuid.uuid4().hex[:8]}", f"eos-{client}-{uuid.uuid4().hex[:8]}"
    log_path = tmp_path / "processor.log"

    # Killed in its third transaction, with 5 records of it written to the output but not committed.
    crashing = start_processor(
        client, bootstrap, input_topic, output_topic, group, tid, log_path, crash_after=25
    )
    try:
        wait_for_line(crashing, "CRASH-POINT", log_path)
    finally:
        crashing.send_signal(signal.SIGKILL)
        crashing.wait()
    uncommitted = read_all(bootstrap, output_topic, "read_uncommitted")
    assert len(uncommitted) >= 25  # the killed transaction's records are in the log

    restarted = start_processor(client, bootstrap, input_topic, output_topic, group, tid, log_path)
    try:
        wait_for_line(restarted, "DONE", log_path)
        assert restarted.wait(30) == 0
    finally:
        if restarted.poll() is None:
            restarted.kill()

    output = read_all(bootstrap, output_topic)
    produced = {(p, offset): value for p, offset, value in read_all(bootstrap, input_topic)}
    seen = [value.split(b":", 2) for _, _, value in output]
    keys = [(int(p), int(offset)) for p, offset, _ in seen]
    assert sorted(keys) == sorted(produced), "every input exactly once"
    assert all(value == produced[(int(p), int(offset))] for p, offset, value in seen)
    # The killed transaction's records are still in the log, aborted: only read_committed leaves them out.
    assert len(read_all(bootstrap, output_topic, "read_uncommitted")) >= len(produced) + 5
