"""A broker's requests to another broker time out on the broker's clock."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from broker_runtime.clock import ManualClock
from broker_runtime.cluster.broker_client import BrokerConnection


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_an_unanswered_request_times_out_exactly_when_the_clock_says_and_closes_the_connection() -> None:
    async def scenario() -> None:
        received = asyncio.Event()

        async def silent_peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(4)
            received.set()
            await reader.read()  # never answers
            writer.close()

        server = await asyncio.start_server(silent_peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        clock = ManualClock()
        conn = BrokerConnection("127.0.0.1", port, "test", clock)
        connecting = asyncio.ensure_future(conn.connect(timeout_s=10))
        while not connecting.done():
            await asyncio.sleep(0.01)  # the real socket connects in real time; the clock does not move
        await connecting
        request = ApiVersionsRequest(client_software_name="test", client_software_version="1")
        sending = asyncio.ensure_future(conn.send(request, timeout_s=30))
        await received.wait()
        clock.advance(29_999)
        await _settle()
        assert not sending.done(), "the request timed out before its timeout"
        clock.advance(1)
        await _settle()
        assert sending.done(), "the request did not time out when its timeout passed on the clock"
        with pytest.raises(TimeoutError):
            await sending
        assert conn.closed
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())
