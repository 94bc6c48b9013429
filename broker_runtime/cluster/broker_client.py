"""A broker talking to another broker over the Kafka protocol: the controller's requests, controlled shutdown and
AlterPartition to the controller (and, for replication, followers' fetches).

`BrokerConnection` is one TCP connection with pipelined requests: responses arrive in request order and are
matched to their requests by correlation id (a mismatch closes the connection). `BrokerClient` keeps one
connection per broker id, made again after a failure; a request that fails raises `ConnectionError` or
`TimeoutError`, and the caller decides whether to retry (requests from the controller are idempotent).
The framing is sans-I/O (protocol/client.py); this module only moves bytes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
from collections import deque
from typing import Any

from broker_runtime.clock import Clock
from broker_runtime.cluster.zk_paths import BrokerRegistration
from broker_runtime.protocol.client import decode_response, encode_request, response_correlation_id
from broker_runtime.protocol.framing import FrameError

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 100 * 1024 * 1024


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, clock: Clock) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[tuple[int, int, int, asyncio.Future]] = deque()
        self._correlation = itertools.count(1)
        self._read_task: asyncio.Task | None = None
        self._clock = clock
        self.closed = False

    async def connect(self, timeout_s: float) -> None:
        opening = asyncio.ensure_future(asyncio.open_connection(self.host, self.port))
        try:
            if not await self._clock.wait_ms(opening, timeout_s * 1000):
                raise TimeoutError(f"no connection to {self.host}:{self.port} within {timeout_s:.0f}s")
        finally:
            if not opening.done():
                opening.cancel()
        self._reader, self._writer = opening.result()
        self._read_task = asyncio.create_task(
            self._read_loop(), name=f"broker-connection-{self.host}:{self.port}"
        )

    async def send(self, request: Any, timeout_s: float) -> Any:
        if self.closed or self._writer is None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        future = asyncio.get_running_loop().create_future()
        # A caller cancelled while waiting (shielded below) leaves the future to the connection: mark its failure
        # as seen, or asyncio logs "exception was never retrieved" when the connection closes.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._pending.append((correlation_id, int(request.__api_key__), int(request.__version__), future))
        self._writer.write(encode_request(request, correlation_id, self.client_id))
        try:
            await self._writer.drain()
            answered = await self._clock.wait_ms(future, timeout_s * 1000)
        except OSError as exc:
            self.close(exc)
            raise ConnectionError(str(exc)) from exc
        if not answered:
            # The slot stays taken; the connection is useless now (a later answer would be misread): close it.
            error = TimeoutError(f"no answer from {self.host}:{self.port} within {timeout_s:.0f}s")
            self.close(error)
            raise error
        return future.result()

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise FrameError(f"response frame of {size} bytes")
                frame = await self._reader.readexactly(size)
                if not self._pending:
                    raise FrameError("a response nobody asked for")
                correlation_id, api_key, version, future = self._pending.popleft()
                if response_correlation_id(frame) != correlation_id:
                    raise FrameError(f"response out of order (expected correlation id {correlation_id})")
                try:
                    response = decode_response(frame, api_key, version)
                except FrameError as exc:
                    if not future.done():
                        future.set_exception(ConnectionError(str(exc)))
                    continue
                if not future.done():
                    future.set_result(response)
        except (asyncio.IncompleteReadError, OSError, FrameError) as exc:
            self.close(exc)
        except asyncio.CancelledError:
            self.close(ConnectionError("connection closed"))
            raise

    def close(self, reason: BaseException | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        error = ConnectionError(f"connection to {self.host}:{self.port} lost: {reason!r}")
        while self._pending:
            future = self._pending.popleft()[3]
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()


class BrokerClient:
    """Connections to the other brokers, by id (the controller's `BrokerTransport`)."""

    def __init__(
        self,
        client_id: str,
        listener: str,
        *,
        clock: Clock,
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
    ) -> None:
        self.client_id = client_id
        self.clock = clock
        self.listener = listener
        self.request_timeout_s = request_timeout_ms / 1000
        self.connect_timeout_s = connect_timeout_ms / 1000
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    async def _connection(self, broker_id: int, host: str, port: int) -> BrokerConnection:
        lock = self._connecting.setdefault(broker_id, asyncio.Lock())
        async with lock:
            conn = self._connections.get(broker_id)
            if conn is not None and not conn.closed and (conn.host, conn.port) == (host, port):
                return conn
            if conn is not None:
                conn.close()
            conn = BrokerConnection(host, port, self.client_id, self.clock)
            try:
                await conn.connect(self.connect_timeout_s)
            except (OSError, TimeoutError) as exc:
                raise ConnectionError(
                    f"cannot connect to broker {broker_id} at {host}:{port}: {exc!r}"
                ) from exc
            self._connections[broker_id] = conn
            return conn

    async def send(self, broker: BrokerRegistration, request: Any) -> Any:
        endpoint = broker.endpoint(self.listener)
        if endpoint is None:
            raise ConnectionError(f"broker {broker.broker_id} has no {self.listener} endpoint")
        return await self.send_to(broker.broker_id, endpoint.host, endpoint.port, request)

    async def send_to(self, broker_id: int, host: str, port: int, request: Any) -> Any:
        conn = await self._connection(broker_id, host, port)
        return await conn.send(request, self.request_timeout_s)

    async def forget(self, broker_id: int) -> None:
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        for broker_id in list(self._connections):
            await self.forget(broker_id)
