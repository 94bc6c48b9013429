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
from collections.abc import Callable
from typing import Any

from broker_runtime.clock import Clock
from broker_runtime.cluster.zk_paths import BrokerRegistration
from broker_runtime.protocol.client import decode_response, encode_request, response_correlation_id
from broker_runtime.protocol.framing import FrameError

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 100 * 1024 * 1024
_SCRATCH_BYTES = 64 * 1024  # holds the usual answers whole; larger frames get a buffer of their own


class _ResponseReader(asyncio.BufferedProtocol):
    """Cuts the byte stream into response frames, each handed to `on_frame` whole. Small frames pass through a
    scratch buffer; a frame that does not fit there (a follower's fetch, up to megabytes) is received straight
    into a buffer of its own size, so its records are copied once from the socket."""

    def __init__(
        self, on_frame: Callable[[bytes | memoryview], None], on_lost: Callable[[BaseException], None]
    ) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._scratch = bytearray(_SCRATCH_BYTES)
        self._start = self._end = 0  # unread bytes of the scratch buffer
        self._frame: bytearray | None = None  # a large frame being received
        self._filled = 0
        self.transport: asyncio.Transport | None = None
        self._writing_paused = False
        self._drained: list[asyncio.Future] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        return memoryview(self._scratch)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                frame, self._frame = self._frame, None
                self._on_frame(memoryview(frame).toreadonly())  # kio reads read-only buffers only
            return
        self._end += nbytes
        scratch = self._scratch
        while self._end - self._start >= 4:
            (size,) = _SIZE.unpack_from(scratch, self._start)
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                self._fail(FrameError(f"response frame of {size} bytes"))
                return
            begin = self._start + 4
            have = self._end - begin
            if have >= size:
                self._start = begin + size
                self._on_frame(bytes(scratch[begin : self._start]))
                if self.transport is None or self.transport.is_closing():
                    return
            elif size > len(scratch) - begin:  # cannot be completed where it starts
                self._frame = bytearray(size)
                self._frame[:have] = scratch[begin : self._end]
                self._filled = have
                self._start = self._end = 0
                return
            else:
                break
        if self._start:  # keep the unread bytes at the front, so the next frame has the whole buffer
            unread = self._end - self._start
            scratch[:unread] = scratch[self._start : self._end]
            self._start, self._end = 0, unread

    def _fail(self, error: BaseException) -> None:
        self._on_lost(error)
        if self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> None:
        self._on_lost(ConnectionError("closed by the other broker"))

    def connection_lost(self, exc: BaseException | None) -> None:
        self._on_lost(exc if exc is not None else ConnectionError("connection closed"))
        self.resume_writing()  # a writer waiting to drain finds the connection closed

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        for waiter in self._drained:
            if not waiter.done():
                waiter.set_result(None)
        self._drained.clear()

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if self._writing_paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drained.append(waiter)
            await waiter


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, clock: Clock) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._transport: asyncio.Transport | None = None
        self._protocol: _ResponseReader | None = None
        self._pending: deque[tuple[int, int, int, asyncio.Future]] = deque()
        self._correlation = itertools.count(1)
        self._clock = clock
        self.closed = False

    async def connect(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        opening = asyncio.ensure_future(
            loop.create_connection(lambda: _ResponseReader(self._on_frame, self.close), self.host, self.port)
        )
        try:
            if not await self._clock.wait_ms(opening, timeout_s * 1000):
                raise TimeoutError(f"no connection to {self.host}:{self.port} within {timeout_s:.0f}s")
        finally:
            if not opening.done():
                opening.cancel()
        transport, protocol = opening.result()
        self._transport, self._protocol = transport, protocol
        if self.closed:  # lost while connecting
            transport.abort()

    async def send(self, request: Any, timeout_s: float) -> Any:
        if self.closed or self._transport is None or self._protocol is None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        future = asyncio.get_running_loop().create_future()
        # A caller cancelled while waiting (shielded below) leaves the future to the connection: mark its failure
        # as seen, or asyncio logs "exception was never retrieved" when the connection closes.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._pending.append((correlation_id, int(request.__api_key__), int(request.__version__), future))
        self._transport.write(encode_request(request, correlation_id, self.client_id))
        try:
            await self._protocol.drain()
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

    def _on_frame(self, frame: bytes | memoryview) -> None:
        """A whole response frame, parsed as it arrives (no task between the socket and the waiting request)."""
        if not self._pending:
            self.close(FrameError("a response nobody asked for"))
            return
        correlation_id, api_key, version, future = self._pending.popleft()
        if response_correlation_id(frame) != correlation_id:
            self.close(FrameError(f"response out of order (expected correlation id {correlation_id})"))
            return
        try:
            response = decode_response(frame, api_key, version)
        except FrameError as exc:
            if not future.done():
                future.set_exception(ConnectionError(str(exc)))
            return
        if not future.done():
            future.set_result(response)

    def close(self, reason: BaseException | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        error = ConnectionError(f"connection to {self.host}:{self.port} lost: {reason!r}")
        while self._pending:
            future = self._pending.popleft()[3]
            if not future.done():
                future.set_exception(error)
        if self._transport is not None:
            self._transport.close()


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
