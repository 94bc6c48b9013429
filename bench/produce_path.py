#!/usr/bin/env python
"""CPU per Produce request on the broker's own path, in process and without sockets: the connection adapter
and its sans-I/O core, the request checks and kio, the dispatcher, the produce handler (header, CRC, the
compiled record walk), the log append (a real write to a log dir) and the response.

    .venv/bin/python bench/produce_path.py [--requests 30000] [--rounds 5] [--profile out.prof]

The requests are what confluent-kafka sends in bench/run.py's produce-1KiB-6p scenario: Produce v10 (v9 to a
broker without v10), acks=1, one
partition per request (round robin over 6), each a batch of 15 keyless 1 KiB records (batch.size=16384). They
reach a `KafkaConnection` of a real standalone broker 16 frames per `data_received`, as the socket delivers them
at that rate, and its responses are collected by a transport that keeps nothing. What the socket and the epoll
loop cost is not in these numbers (bench/produce_cpu.py measures the whole broker process); what is left is the
Python work per request, steady enough on a busy machine to compare changes to that path.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import importlib
import inspect
import io
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path

from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i32Timedelta

from broker_runtime.broker import Broker
from broker_runtime.config import BrokerConfig
from broker_runtime.protocol.records import build_batch
from broker_runtime.server.connection import KafkaConnection

TOPIC, PARTITIONS, RECORDS_PER_BATCH, SIZE = "bench", 6, 15, 1024
FRAMES_PER_READ = 16
_HEADER = struct.Struct(">hhih")


def produce_frame(correlation_id: int, partition: int, batch: bytes, version: int) -> bytes:
    schema = importlib.import_module(f"kio.schema.produce.v{version}.request")
    ProduceRequest, TopicProduceData, PartitionProduceData = (
        schema.ProduceRequest, schema.TopicProduceData, schema.PartitionProduceData)  # fmt: skip
    request = ProduceRequest(
        transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(TopicProduceData(name=TOPIC, partition_data=(
            PartitionProduceData(index=i32(partition), records=batch),)),),
    )  # fmt: skip
    out = io.BytesIO()
    client_id = b"rdkafka"
    out.write(_HEADER.pack(0, version, correlation_id, len(client_id)) + client_id + b"\x00")  # header v2
    entity_writer(ProduceRequest)(out, request)
    body = out.getvalue()
    return struct.pack(">i", len(body)) + body


class Transport:
    """What the connection writes to: counts responses, keeps nothing."""

    def __init__(self) -> None:
        self.responses = 0
        self.expected = 0
        self.caught_up = asyncio.Event()

    def get_extra_info(self, name: str, default=None):
        return ("127.0.0.1", 50000) if name == "peername" else default

    def writelines(self, data) -> None:
        self.responses += len(data)
        if self.responses >= self.expected:
            self.caught_up.set()

    def write(self, data) -> None:
        self.writelines([data])

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


async def measure(requests: int, rounds: int, profile: Path | None) -> None:
    workdir = Path(
        tempfile.mkdtemp(prefix="produce-path-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
    )
    broker = Broker(BrokerConfig({"log.dirs": str(workdir), "listeners": "PLAINTEXT://127.0.0.1:0"}))
    await broker.start()
    try:
        created = broker.create_topic(TOPIC, PARTITIONS, 1)
        if asyncio.iscoroutine(created):  # an older tree (bench/produce_cpu.py's baseline) creates at once
            await created
        batch = bytes(build_batch([(None, b"x" * SIZE)] * RECORDS_PER_BATCH))
        # confluent-kafka's version: 10, or the highest an older tree serves
        version = min(10, broker.dispatcher.versions[0][1])
        frames = [produce_frame(i, i % PARTITIONS, batch, version) for i in range(requests)]
        reads = [
            (b"".join(frames[i : i + FRAMES_PER_READ]), len(frames[i : i + FRAMES_PER_READ]))
            for i in range(0, requests, FRAMES_PER_READ)
        ]
        transport = Transport()
        if "listener" in inspect.signature(KafkaConnection).parameters:
            conn = KafkaConnection(broker._listener, "127.0.0.1")
        else:  # an older tree
            conn = KafkaConnection(broker.dispatcher, broker.config["socket.request.max.bytes"])
        conn.connection_made(transport)

        async def feed(chunks: list[tuple[bytes, int]]) -> None:
            for chunk, count in chunks:
                transport.expected += count
                transport.caught_up.clear()
                conn.data_received(chunk)
                await transport.caught_up.wait()

        await feed(reads[: len(reads) // 10])  # warm-up
        measured = reads[len(reads) // 10 :]
        n = sum(count for _, count in measured)
        per_request = []
        for _ in range(rounds):
            profiler = cProfile.Profile() if profile else None
            cpu0 = time.process_time()
            if profiler:
                profiler.enable()
            await feed(measured)
            if profiler:
                profiler.disable()
                profiler.dump_stats(profile)
            per_request.append((time.process_time() - cpu0) / n)
        best, median = min(per_request), statistics.median(per_request)
        print(
            f"{rounds} x {n} Produce requests of {RECORDS_PER_BATCH} x {SIZE} B: {best * 1e6:.1f} us CPU per "
            f"request at best, {median * 1e6:.1f} median ({best / RECORDS_PER_BATCH * 1e6:.2f} and "
            f"{median / RECORDS_PER_BATCH * 1e6:.2f} CPU-s per million records)"
        )
        conn.connection_lost(None)
    finally:
        await broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=5, help="measured passes over the requests")
    parser.add_argument("--profile", type=Path, help="cProfile the measured requests into this file")
    args = parser.parse_args()
    asyncio.run(measure(args.requests, args.rounds, args.profile))


if __name__ == "__main__":
    main()
