"""Per-request cost of the schema walk (protocol/request_check.py) next to kio's decode of the same body.

    python bench/request_check.py

Bodies are typical hot-path requests: Produce v9 with one 16 KiB batch, and with 100 partitions; Fetch v12 for one
partition, and for 100. Prints microseconds per request (best of five timeit runs).
"""

from __future__ import annotations

import datetime
import io
import timeit

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from broker_runtime.protocol.request_check import check_request


def _produce(topics: int, partitions: int, batch: bytes) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=tuple(
            TopicProduceData(
                name=f"topic-{t}",
                partition_data=tuple(PartitionProduceData(index=i32(p), records=batch) for p in range(partitions)),
            )
            for t in range(topics)
        ),
    )  # fmt: skip


def _fetch(topics: int, partitions: int) -> FetchRequest:
    return FetchRequest(
        replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)), min_bytes=i32(1),
        max_bytes=i32(52428800), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=tuple(
            FetchTopic(
                topic=f"topic-{t}",
                partitions=tuple(
                    FetchPartition(partition=i32(p), current_leader_epoch=i32(0), fetch_offset=i64(1000),
                                   last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
                                   partition_max_bytes=i32(1048576))
                    for p in range(partitions)
                ),
            )
            for t in range(topics)
        ),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip


def _best_us(fn, n: int) -> float:
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def main() -> None:
    cases = {
        "Produce v9, 1 partition, 16 KiB batch": _produce(1, 1, bytes(16384)),
        "Produce v9, 10 topics x 10 partitions, 1 KiB batches": _produce(10, 10, bytes(1024)),
        "Fetch v12, 1 partition": _fetch(1, 1),
        "Fetch v12, 10 topics x 10 partitions": _fetch(10, 10),
    }
    print(f"{'request':<56}{'walk µs':>10}{'kio µs':>10}{'walk/kio':>10}")
    for label, request in cases.items():
        out = io.BytesIO()
        entity_writer(type(request))(out, request)
        body = memoryview(out.getvalue())
        cls = type(request)
        reader = entity_reader(cls)
        assert check_request(cls, body, 0) == reader(body, 0)[1] == len(body)
        n = 20000
        walk = _best_us(lambda cls=cls, body=body: check_request(cls, body, 0), n)
        decode = _best_us(lambda reader=reader, body=body: reader(body, 0), n)
        print(f"{label:<56}{walk:>10.2f}{decode:>10.2f}{walk / decode:>10.2f}")


if __name__ == "__main__":
    main()
