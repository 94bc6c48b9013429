"""Helpers for the transaction tests: reading a topic to its end at an isolation level, and asking the
transaction coordinator what it holds (DescribeTransactions, spoken raw)."""

from __future__ import annotations

import datetime
import os
import signal
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as E
from kio.static.primitive import Records, i32Timedelta

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.protocol.records import build_batch
from broker_runtime.protocol.varint import read_uvarint
from broker_runtime.tools.admin_client import build_request

DEADLINE_S = 60


def new_topic(clients, bootstrap: str, prefix: str, partitions: int = 3) -> str:
    """A topic of its own for one test, `partitions` partitions."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    clients.create_topic(bootstrap, name, partitions)
    return name


def read_all(
    bootstrap: str, topic: str, isolation: str = "read_committed", deadline_s: float = DEADLINE_S
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record a consumer with `isolation` reads up to the partitions' ends
    (the last stable offset for read_committed)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "isolation.level": isolation, "enable.partition.eof": True,
    })  # fmt: skip
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        got = []
        deadline = time.monotonic() + deadline_s
        while at_end != set(partitions):
            assert time.monotonic() < deadline, f"{topic}: only partitions {at_end} reached their end"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            got.append((message.partition(), message.offset(), message.value()))
        return got
    finally:
        consumer.close()


def values(records) -> list[bytes]:
    return sorted(value for _, _, value in records)


@dataclass(frozen=True)
class DescribedTransaction:
    error_code: int
    transactional_id: str
    transaction_state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    topics: tuple[tuple[str, tuple[int, ...]], ...]


def _parse_describe_transactions(frame: bytes) -> list[DescribedTransaction]:
    """DescribeTransactions v0 read by hand: kio refuses the -1 start time Kafka sends before a transaction."""
    pos = 4  # correlation id

    def uvarint() -> int:
        nonlocal pos
        value, pos = read_uvarint(frame, pos)
        return value

    def fixed(fmt: str) -> int:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, frame, pos)
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = uvarint() - 1
        text = frame[pos : pos + n].decode()
        pos += n
        return text

    def tagged() -> None:
        nonlocal pos
        for _ in range(uvarint()):
            uvarint()
            pos += uvarint()

    tagged()  # response header v1
    fixed(">i")  # throttle time
    states = []
    for _ in range(uvarint() - 1):
        error, tid, state = fixed(">h"), string(), string()
        timeout, start, pid, epoch = fixed(">i"), fixed(">q"), fixed(">q"), fixed(">h")
        topics = []
        for _ in range(uvarint() - 1):
            topic = string()
            partitions = tuple(fixed(">i") for _ in range(uvarint() - 1))
            tagged()
            topics.append((topic, partitions))
        tagged()
        states.append(DescribedTransaction(error, tid, state, timeout, start, pid, epoch, tuple(topics)))
    return states


def describe_transaction(brokers, raw, transactional_id: str) -> DescribedTransaction | None:
    """The transaction as its coordinator describes it; `brokers` is one broker process or several (every live
    one is asked, the coordinator answers without an error)."""
    request_type = load_request_schema(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    candidates = [b for b in (brokers if isinstance(brokers, list | tuple) else [brokers]) if b.alive]
    state = None
    for broker in candidates:
        try:
            with raw.RawClient.to(broker, timeout=30) as client:
                client.send(request_type(transactional_ids=(transactional_id,)))
                (state,) = _parse_describe_transactions(client.recv_frame())
        except OSError:
            continue  # a broker going down meanwhile
        if state.error_code == E.none:
            return state
    return state


def wait_for_state(broker, raw, transactional_id: str, wanted: str):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        state = describe_transaction(broker, raw, transactional_id)
        if state.error_code == E.none and state.transaction_state == wanted:
            return state
        assert time.monotonic() < deadline, f"{transactional_id} stays {state}"
        time.sleep(0.1)


def ms(n: int):
    return i32Timedelta.parse(datetime.timedelta(milliseconds=n))


def find_transaction_coordinator(client, transactional_id: str, version: int = 4):
    deadline = time.monotonic() + 30  # __transaction_state is created and loaded in the background meanwhile
    while True:
        found = client.call(build_request(
            ApiKey.FIND_COORDINATOR, version, key=transactional_id, key_type=1, coordinator_keys=(transactional_id,)
        ))  # fmt: skip
        coordinator = found.coordinators[0] if version >= 4 else found
        if coordinator.error_code == E.none:
            return coordinator
        assert coordinator.error_code == E.coordinator_not_available and time.monotonic() < deadline, (
            coordinator
        )
        time.sleep(0.05)


def init_producer_id(
    client, transactional_id: str, version: int = 4, timeout_ms: int = 60000, pid=-1, epoch=-1
):
    deadline = time.monotonic() + 30
    while True:
        response = client.call(build_request(
            ApiKey.INIT_PRODUCER_ID, version, transactional_id=transactional_id, transaction_timeout=ms(timeout_ms),
            producer_id=pid, producer_epoch=epoch,
        ))  # fmt: skip
        if response.error_code not in (E.coordinator_load_in_progress, E.concurrent_transactions):
            return response
        assert time.monotonic() < deadline, response
        time.sleep(0.05)


class RawTransactionalProducer:
    """A transactional producer spoken raw: InitProducerId, AddPartitionsToTxn and EndTxn to its coordinator
    (`client`), Produce to `via` (a partition's leader; the coordinator's broker by default)."""

    def __init__(self, client, transactional_id: str) -> None:
        find_transaction_coordinator(client, transactional_id)
        response = init_producer_id(client, transactional_id)
        assert response.error_code == E.none
        self.client, self.tid = client, transactional_id
        self.pid, self.epoch = int(response.producer_id), int(response.producer_epoch)
        self.sequences: dict[tuple[str, int], int] = {}

    def add(self, topic: str, partition: int) -> None:
        response = self.client.call(build_request(
            ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=self.tid,
            v3_and_below_producer_id=self.pid, v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=lambda m: (m.AddPartitionsToTxnTopic(name=topic, partitions=(partition,)),),
        ))  # fmt: skip
        assert (
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == E.none
        )

    def produce(
        self, topic: str, partition: int, values: list[bytes], version: int = 9, via=None
    ) -> tuple[E, int]:
        sequence = self.sequences.get((topic, partition), 0)
        batch = build_batch([(None, v) for v in values], producer_id=self.pid, producer_epoch=self.epoch,
                            base_sequence=sequence, transactional=True)  # fmt: skip
        response = (via or self.client).call(build_request(
            ApiKey.PRODUCE, version, transactional_id=self.tid, acks=-1, timeout=ms(10000),
            topic_data=lambda m: (m.TopicProduceData(name=topic, partition_data=(
                m.PartitionProduceData(index=partition, records=Records(bytes(batch))),)),),
        ))  # fmt: skip
        part = response.responses[0].partition_responses[0]
        if part.error_code == E.none:
            self.sequences[(topic, partition)] = sequence + len(values)
        return part.error_code, int(part.base_offset)

    def end(self, committed: bool) -> E:
        return self.client.call(build_request(
            ApiKey.END_TXN, 3, transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch,
            committed=committed,
        )).error_code  # fmt: skip


def partition_offsets(client, topic: str, partition: int) -> tuple[int, int]:
    """(high watermark, last stable offset) of a partition, from its leader (`client`)."""
    response = client.call(build_request(
        ApiKey.FETCH, 12, replica_id=-1, max_wait=ms(0), min_bytes=0, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=lambda m: (m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),)),),
    ))  # fmt: skip
    part = response.responses[0].partitions[0]
    assert part.error_code == E.none
    return int(part.high_watermark), int(part.last_stable_offset)


# --- one client's transactions: batches of values, each committed or aborted, spread over 3 partitions ---


def confluent_transaction(
    bootstrap: str, topic: str, tid: str, batches: list[tuple[list[bytes], bool]]
) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    for batch, commit in batches:
        producer.begin_transaction()
        for i, value in enumerate(batch):
            producer.produce(topic, value=value, partition=i % 3)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # the records reach the log before the abort
            producer.abort_transaction(30)


def kafka_python_transaction(bootstrap, topic, tid, batches) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    producer.init_transactions()
    for batch, commit in batches:
        producer.begin_transaction()
        for i, value in enumerate(batch):
            producer.send(topic, value=value, partition=i % 3)
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()


def aiokafka_transaction(bootstrap, topic, tid, batches) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        await producer.start()
        try:
            for batch, commit in batches:
                await producer.begin_transaction()
                for i, value in enumerate(batch):
                    await producer.send_and_wait(topic, value=value, partition=i % 3)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), DEADLINE_S))


def kafkajs_transaction(bootstrap, topic, tid, batches, clients) -> None:
    seed = bootstrap.split(",")[0]  # kafkajs takes one broker per list entry; the first finds the others
    for batch, commit in batches:
        clients.run_kafkajs(
            "transaction", seed, topic=topic, transactionalId=tid, commit=commit,
            messages=[clients.rec_to_js(clients.Rec(None, v, (), None, None, None), i % 3) for i, v in enumerate(batch)],
        )  # fmt: skip


def run_transactions(client: str, bootstrap: str, topic: str, tid: str, batches, clients) -> None:
    """Run `batches` ([(values, commit)]) as transactions of one producer of `client`."""
    if client == "confluent":
        confluent_transaction(bootstrap, topic, tid, batches)
    elif client == "kafka-python":
        kafka_python_transaction(bootstrap, topic, tid, batches)
    elif client == "aiokafka":
        aiokafka_transaction(bootstrap, topic, tid, batches)
    elif client == "kafkajs":
        kafkajs_transaction(bootstrap, topic, tid, batches, clients)
    else:
        raise ValueError(client)


# --- exactly-once read-process-write (txn_processor.py in its own process) --------------------------------------

PROCESSOR = Path(__file__).resolve().parent / "txn_processor.py"


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


def check_exactly_once_across_a_killed_processor(
    client: str, bootstrap: str, input_topic: str, output_topic: str, clients, tmp_path: Path
) -> None:
    """90 inputs over 3 partitions; the processor is killed in its third transaction (5 of its records in the
    log, uncommitted), restarted, and runs to the end: the read_committed output holds every input once."""
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
