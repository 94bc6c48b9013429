"""The asyncio connection and listener with real sockets, in process, around a dispatch table of test handlers
(ApiVersions v0 requests whose handler does what the correlation id says): a cancelled handler or a failed one
closes its connection instead of leaving the client waiting, and `queued.max.requests` holds requests back until
the queued ones have started. Produce handlers start as their request is taken (no task for one that does not
await) and keep the same guarantees."""

from __future__ import annotations

import asyncio
import datetime
import struct

from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.response import ProduceResponse
from kio.static.primitive import i32Timedelta

from broker_runtime.clock import Clock
from broker_runtime.config import BrokerConfig
from broker_runtime.server.dispatch import Dispatcher
from broker_runtime.server.listener import Listener

OK = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=())
PARK, CANCEL, FAIL = 100, 200, 300  # correlation ids that make the test handler park, cancel itself, fail


def request(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 1) + b"t"
    return struct.pack(">i", len(body)) + body


async def serve(tmp_path, handler, **config: str) -> Listener:
    broker_config = BrokerConfig(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), **config}
    )
    listener = Listener(
        Dispatcher(None, {18: handler}, {18: (0, 3)}), broker_config.listeners[0], broker_config, Clock()
    )
    await listener.start()
    return listener


async def read_answers(reader: asyncio.StreamReader) -> tuple[list[int], bool]:
    """Correlation ids answered until the broker closes the connection (True) or stays silent for 5 s."""
    got = []
    try:
        while True:
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
            frame = await reader.readexactly(size)
            got.append(struct.unpack_from(">i", frame, 0)[0])
    except asyncio.IncompleteReadError:
        return got, True
    except TimeoutError:
        return got, False


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_cancelled_handler_closes_its_connection_instead_of_leaving_a_hole(tmp_path) -> None:
    release = asyncio.Event()

    async def handler(ctx, _request):
        if ctx.header.correlation_id == PARK:
            await release.wait()
        if ctx.header.correlation_id == CANCEL:
            asyncio.current_task().cancel()
            await asyncio.sleep(0)
        return OK

    async def scenario():
        listener = await serve(tmp_path, handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(request(1) + request(PARK) + request(CANCEL) + request(2))
        await writer.drain()
        asyncio.get_running_loop().call_later(0.1, release.set)
        got, closed = await read_answers(reader)
        # The answers before the cancelled request may go out; nothing after it, and the connection closes.
        assert closed and got in ([1], [1, PARK]), (got, closed)
        writer.close()
        await listener.stop()

    run(scenario())


def test_a_failed_handler_closes_its_connection(tmp_path) -> None:
    async def handler(ctx, _request):
        if ctx.header.correlation_id == FAIL:
            raise RuntimeError("a bug")
        return OK

    async def scenario():
        listener = await serve(tmp_path, handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(request(1) + request(FAIL) + request(2))
        await writer.drain()
        assert await read_answers(reader) == ([1], True)
        writer.close()
        await listener.stop()

    run(scenario())


def test_queued_requests_wait_until_the_queue_has_room(tmp_path) -> None:
    queued_when_started: list[int] = []
    listener: Listener | None = None

    async def handler(_ctx, _request):
        assert listener is not None
        queued_when_started.append(listener.queue.queued)
        return OK

    async def scenario():
        nonlocal listener
        listener = await serve(tmp_path, handler, **{"queued.max.requests": "1"})
        connections = [await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(4)]
        for _, writer in connections:
            writer.write(b"".join(request(i) for i in range(1, 11)))  # ten requests in one segment
        for _, writer in connections:
            await writer.drain()
        for reader, writer in connections:
            got = []
            while len(got) < 10:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                got.append(struct.unpack_from(">i", await reader.readexactly(size), 0)[0])
            assert got == list(range(1, 11))
            writer.close()
        # Each handler started with only its own request counted as queued: none was read ahead of it.
        assert len(queued_when_started) == 40 and max(queued_when_started) == 1
        await listener.stop()

    run(scenario())


# --------------------------------------------------------------------------------------------------------------
# Produce: the handler's first step runs as the request is taken; one that awaits goes on in a task

PRODUCED = ProduceResponse(responses=(), throttle_time=i32Timedelta.parse(datetime.timedelta(0)))


def produce_request(correlation_id: int) -> bytes:
    """Produce v9 (flexible header), null transactional id, acks 1, timeout 1000, no topics."""
    body = (
        struct.pack(">hhih", 0, 9, correlation_id, 1) + b"t" + b"\x00" + b"\x00" + struct.pack(">hi", 1, 1000)
    )
    body += b"\x01\x00"  # topic_data: empty compact array; no tagged fields
    return struct.pack(">i", len(body)) + body


async def serve_produce(tmp_path, handler) -> Listener:
    broker_config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)})
    listener = Listener(
        Dispatcher(None, {0: handler}, {0: (3, 9)}), broker_config.listeners[0], broker_config, Clock()
    )
    await listener.start()
    return listener


def test_a_produce_that_awaits_is_answered_in_order_after_the_ones_answered_at_once(tmp_path) -> None:
    release = asyncio.Event()
    in_task: list[bool] = []

    async def handler(ctx, _request):
        if ctx.header.correlation_id == PARK:
            await release.wait()
            await asyncio.sleep(0)  # a bare yield, too
            in_task.append(asyncio.current_task() is not None)
        return PRODUCED

    async def scenario():
        listener = await serve_produce(tmp_path, handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(produce_request(1) + produce_request(PARK) + produce_request(2) + produce_request(3))
        await writer.drain()
        asyncio.get_running_loop().call_later(0.1, release.set)
        got = []
        while len(got) < 4:
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
            got.append(struct.unpack_from(">i", await reader.readexactly(size), 0)[0])
        assert got == [1, PARK, 2, 3]
        assert in_task == [True]  # the rest of the parked handler ran in a task
        writer.close()
        await listener.stop()

    run(scenario())


def test_a_produce_cancelled_while_it_awaits_closes_its_connection(tmp_path) -> None:
    async def handler(ctx, _request):
        if ctx.header.correlation_id == CANCEL:
            await asyncio.sleep(0)
            asyncio.current_task().cancel()
            await asyncio.sleep(0)
        return PRODUCED

    async def scenario():
        listener = await serve_produce(tmp_path, handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(produce_request(1) + produce_request(CANCEL) + produce_request(2))
        await writer.drain()
        assert await read_answers(reader) == ([1], True)
        writer.close()
        await listener.stop()

    run(scenario())


def test_a_produce_failing_at_once_closes_its_connection_after_the_answers_before_it(tmp_path) -> None:
    async def handler(ctx, _request):
        if ctx.header.correlation_id == FAIL:
            raise RuntimeError("a bug")
        return PRODUCED

    async def scenario():
        listener = await serve_produce(tmp_path, handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(produce_request(1) + produce_request(2) + produce_request(FAIL) + produce_request(3))
        await writer.drain()
        assert await read_answers(reader) == ([1, 2], True)
        writer.close()
        await listener.stop()

    run(scenario())


def test_a_produce_awaiting_when_its_client_goes_away_is_cancelled_where_it_waits(tmp_path) -> None:
    cancelled = asyncio.Event()

    async def handler(ctx, _request):
        try:
            await asyncio.Event().wait()  # never set: only the connection's end stops it
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return PRODUCED

    async def scenario():
        listener = await serve_produce(tmp_path, handler)
        _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(produce_request(PARK))
        await writer.drain()
        writer.close()
        await asyncio.wait_for(cancelled.wait(), 5)
        await listener.stop()

    run(scenario())
