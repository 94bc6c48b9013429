"""One consumer-group member in its own process, for the group tests (so that a test can kill it with -9).

    python tests/integration/group_member.py '{"client": "confluent", "bootstrap": "...", "group": "g",
                                                "topic": "t", "assignor": "range", ...}'

Clients: confluent, kafka-python, aiokafka. Every client runs with its defaults except the bootstrap address,
the group, `auto.offset.reset=earliest`, manual commits and the options in the request (assignor, static
membership, session timeout). The member commits synchronously after every batch it processes; with "pace_ms" it takes at most 10 records
per batch and works that long on each before committing (so that a kill lands between processing and commit).

Events go to stdout, one JSON object per line, flushed at once:
    {"event": "assigned", "partitions": [..], "member_id": ..., "generation": ..., "t": ...}  (full assignment)
    {"event": "revoked", "partitions": [..], "t": ...}
    {"event": "records", "records": [[partition, offset], ...], "t": ...}
    {"event": "committed", "offsets": {partition: next offset}, "t": ...}
    {"event": "commit_failed", "error": "...", "t": ...}
    {"event": "closed", "t": ...}
SIGTERM closes the consumer the way an application shuts down (commit, leave the group) and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time

STOP = False
BATCH = 100
PACE_S = 0.0


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def pace() -> None:
    if PACE_S:
        time.sleep(PACE_S)


def _on_sigterm(*_: object) -> None:
    global STOP
    STOP = True


def run_confluent(req: dict) -> None:
    from confluent_kafka import Consumer, KafkaException

    conf = {
        "bootstrap.servers": req["bootstrap"],
        "group.id": req["group"],
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": req.get("assignor", "range"),
    }
    if req.get("instance_id"):
        conf["group.instance.id"] = req["instance_id"]
    if req.get("session_timeout_ms"):
        conf["session.timeout.ms"] = req["session_timeout_ms"]
    consumer = Consumer(conf)

    def full_assignment() -> list[int]:
        return sorted(tp.partition for tp in consumer.assignment())

    def on_assign(c, partitions):
        # Cooperative: `partitions` is only what was added; the client adds it after this callback.
        now = sorted({*full_assignment(), *(tp.partition for tp in partitions)})
        emit(
            "assigned",
            partitions=now,
            added=sorted(tp.partition for tp in partitions),
            member_id=c.memberid(),
        )

    def on_revoke(c, partitions):
        emit("revoked", partitions=sorted(tp.partition for tp in partitions))

    consumer.subscribe([req["topic"]], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not STOP:
            messages = consumer.consume(BATCH, 0.2)
            records = []
            for m in messages:
                if m.error():
                    continue
                records.append([m.partition(), m.offset()])
            if records:
                emit("records", records=records)
                pace()
                try:
                    committed = consumer.commit(asynchronous=False)
                    emit(
                        "committed",
                        offsets={tp.partition: tp.offset for tp in committed or [] if tp.error is None},
                    )
                except KafkaException as exc:
                    emit("commit_failed", error=str(exc))
    finally:
        consumer.close()
        emit("closed")


def run_kafka_python(req: dict) -> None:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import KafkaError

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    options = {
        "bootstrap_servers": req["bootstrap"],
        "group_id": req["group"],
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "partition_assignment_strategy": [assignors[req.get("assignor", "range")]],
    }
    if req.get("instance_id"):
        options["group_instance_id"] = req["instance_id"]
    if req.get("session_timeout_ms"):
        options["session_timeout_ms"] = req["session_timeout_ms"]
    consumer = KafkaConsumer(**options)

    def generation():
        gen = getattr(consumer._coordinator, "_generation", None)
        return (getattr(gen, "member_id", None), getattr(gen, "generation_id", None))

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            member_id, gen = generation()
            emit(
                "assigned",
                partitions=sorted(tp.partition for tp in consumer.assignment()),
                added=sorted(tp.partition for tp in assigned),
                member_id=member_id,
                generation=gen,
            )

    consumer.subscribe([req["topic"]], listener=Listener())
    try:
        while not STOP:
            batches = consumer.poll(timeout_ms=200, max_records=BATCH)
            records = [[tp.partition, m.offset] for tp, ms in batches.items() for m in ms]
            if records:
                emit("records", records=records)
                pace()
                offsets = {}
                for tp, ms in batches.items():
                    offsets[tp.partition] = ms[-1].offset + 1
                try:
                    consumer.commit()
                    emit("committed", offsets=offsets)
                except KafkaError as exc:
                    emit("commit_failed", error=repr(exc))
    finally:
        consumer.close()
        emit("closed")


async def _run_aiokafka(req: dict) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    options = {
        "bootstrap_servers": req["bootstrap"],
        "group_id": req["group"],
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "partition_assignment_strategy": (assignors[req.get("assignor", "range")],),
    }
    if req.get("instance_id"):
        options["group_instance_id"] = req["instance_id"]
    if req.get("session_timeout_ms"):
        options["session_timeout_ms"] = req["session_timeout_ms"]
    consumer = AIOKafkaConsumer(**options)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned):
            coordinator = consumer._coordinator
            emit(
                "assigned",
                partitions=sorted(tp.partition for tp in assigned),
                member_id=getattr(coordinator, "member_id", None),
                generation=getattr(coordinator, "generation", None),
            )

    await consumer.start()
    consumer.subscribe([req["topic"]], listener=Listener())
    try:
        while not STOP:
            batches = await consumer.getmany(timeout_ms=200, max_records=BATCH)
            records = [[tp.partition, m.offset] for tp, ms in batches.items() for m in ms]
            if records:
                emit("records", records=records)
                await asyncio.sleep(PACE_S)
                offsets = {tp: ms[-1].offset + 1 for tp, ms in batches.items()}
                try:
                    await consumer.commit(offsets)
                    emit("committed", offsets={tp.partition: o for tp, o in offsets.items()})
                except KafkaError as exc:
                    emit("commit_failed", error=repr(exc))
    finally:
        await consumer.stop()
        emit("closed")


def main() -> int:
    global BATCH, PACE_S
    req = json.loads(sys.argv[1])
    # The client's own log goes to stderr (a file the harness shows when a member misbehaves).
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    if req.get("pace_ms"):
        BATCH, PACE_S = 10, req["pace_ms"] / 1000
    signal.signal(signal.SIGTERM, _on_sigterm)
    client = req["client"]
    if client == "confluent":
        run_confluent(req)
    elif client == "kafka-python":
        run_kafka_python(req)
    elif client == "aiokafka":
        asyncio.run(_run_aiokafka(req))
    else:
        raise SystemExit(f"unknown client {client!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
