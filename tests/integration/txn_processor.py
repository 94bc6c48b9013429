"""An exactly-once read-process-write processor, run as its own process by test_transactions_clients.py.

    python txn_processor.py CLIENT BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID BATCH [CRASH_AFTER]

CLIENT is confluent or kafka-python. The processor reads INPUT (every partition, from the group's committed
offsets), writes "<input partition>:<input offset>:<value>" to OUTPUT for every record, and commits the output
and the consumed offsets in one transaction per BATCH records, until it has consumed INPUT to the end offsets it
saw at start. With CRASH_AFTER it stops in the middle of a transaction once it has written that many records in
this run (flushed to the brokers, not committed), prints CRASH-POINT and waits to be killed.
"""

from __future__ import annotations

import sys
import threading

POLL_S = 0.5


def crash_point() -> None:
    print("CRASH-POINT", flush=True)
    threading.Event().wait()


def run_confluent(bootstrap, input_topic, output_topic, group, transactional_id, batch, crash_after) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(60)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })  # fmt: skip
    partitions = sorted(consumer.list_topics(input_topic, timeout=30).topics[input_topic].partitions)
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(input_topic, p), timeout=30)[1] for p in partitions
    }
    committed = consumer.committed([TopicPartition(input_topic, p) for p in partitions], timeout=60)
    positions = {tp.partition: max(tp.offset, 0) for tp in committed}
    consumer.assign([TopicPartition(input_topic, p, positions[p]) for p in partitions])
    written = 0
    while any(positions[p] < ends[p] for p in partitions):
        producer.begin_transaction()
        in_batch = 0
        while in_batch < batch and any(positions[p] < ends[p] for p in partitions):
            message = consumer.poll(POLL_S)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(message.error())
            producer.produce(
                output_topic, key=message.key(),
                value=f"{message.partition()}:{message.offset()}:".encode() + message.value(),
            )  # fmt: skip
            positions[message.partition()] = message.offset() + 1
            in_batch += 1
            written += 1
            if crash_after is not None and written >= crash_after:
                producer.flush(30)
                crash_point()
        producer.send_offsets_to_transaction(
            [TopicPartition(input_topic, p, positions[p]) for p in partitions],
            consumer.consumer_group_metadata(),
            60,
        )
        producer.commit_transaction(60)
    consumer.close()


def run_kafka_python(
    bootstrap, input_topic, output_topic, group, transactional_id, batch, crash_after
) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    producer.init_transactions()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest",
        isolation_level="read_committed",
    )  # fmt: skip
    partitions = sorted(consumer.partitions_for_topic(input_topic))
    tps = [TopicPartition(input_topic, p) for p in partitions]
    consumer.assign(tps)
    ends = {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    positions = {}
    for tp in tps:
        committed = consumer.committed(tp)
        positions[tp.partition] = committed or 0
        consumer.seek(tp, positions[tp.partition])
    written = 0
    while any(positions[p] < ends[p] for p in partitions):
        producer.begin_transaction()
        in_batch = 0
        while in_batch < batch and any(positions[p] < ends[p] for p in partitions):
            for tp, messages in consumer.poll(
                timeout_ms=int(POLL_S * 1000), max_records=batch - in_batch
            ).items():
                for message in messages:
                    producer.send(
                        output_topic, key=message.key,
                        value=f"{message.partition}:{message.offset}:".encode() + message.value,
                    )  # fmt: skip
                    positions[tp.partition] = message.offset + 1
                    in_batch += 1
                    written += 1
                    if crash_after is not None and written >= crash_after:
                        producer.flush(30)
                        crash_point()
        producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(positions[tp.partition], "", -1) for tp in tps}, group
        )
        producer.commit_transaction()
    consumer.close()
    producer.close()


def main(argv: list[str]) -> None:
    client, bootstrap, input_topic, output_topic, group, transactional_id, batch = argv[:7]
    crash_after = int(argv[7]) if len(argv) > 7 else None
    run = {"confluent": run_confluent, "kafka-python": run_kafka_python}[client]
    run(bootstrap, input_topic, output_topic, group, transactional_id, int(batch), crash_after)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
