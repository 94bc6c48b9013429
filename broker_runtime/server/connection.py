"""One client connection: framing in, ordered responses out.

Requests on a connection are handled concurrently (a long-poll Fetch must not hold up a Metadata behind it),
but responses leave strictly in request order: each request takes a slot in `_pending` when it arrives and the
head of the queue is written as soon as it is complete. A request whose handler returns None (Produce with
acks=0) frees its slot without writing. A frame that cannot be parsed closes the connection with a log line;
nothing else is touched.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING

from broker_runtime.errors import CloseConnection
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.framing import FrameDecoder, FrameError, encode_response, parse_header

if TYPE_CHECKING:
    from broker_runtime.server.dispatch import Dispatcher

log = logging.getLogger(__name__)

_ids = itertools.count(1)
_MAX_IN_FLIGHT = 64  # stop reading from a client that has this many requests unanswered


class _Slot:
    __slots__ = ("correlation_id", "done", "payload")

    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id
        self.done = False
        self.payload: bytes | None = None


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatcher: Dispatcher, max_request_size: int) -> None:
        self._dispatcher = dispatcher
        self._decoder = FrameDecoder(max_request_size)
        self._pending: deque[_Slot] = deque()
        self._tasks: set[asyncio.Task] = set()
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._writing_paused = False
        self.id = f"conn-{next(_ids)}"
        self.peer = "?"

    # --- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._dispatcher.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._dispatcher.connections.discard(self)
        for task in self._tasks:
            task.cancel()
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
            for frame in frames:
                self._on_frame(frame)
        except FrameError as exc:
            self.abort(f"closing connection {self.id} from {self.peer}: {exc}")

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # --- requests -----------------------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        log.warning("%s", reason)
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _on_frame(self, frame: memoryview) -> None:
        if self._transport is None:
            return
        header, body_pos = parse_header(frame)
        ctx = RequestContext(self._dispatcher.broker, header, self.peer.rsplit(":", 1)[0], self.id)
        immediate, coro = self._dispatcher.prepare(ctx, frame, body_pos)
        slot = _Slot(header.correlation_id)
        self._pending.append(slot)
        if coro is None:
            self._complete(slot, immediate)
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t, s=slot: self._on_done(s, t))
        self._update_reading()

    def _on_done(self, slot: _Slot, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled() or self._transport is None:
            return
        exc = task.exception()
        if isinstance(exc, CloseConnection):
            log.info("closing connection %s from %s: %s", self.id, self.peer, exc)
            self.close()
            return
        if exc is not None:
            log.error("unexpected error handling a request on %s from %s", self.id, self.peer, exc_info=exc)
            self.abort(f"closing connection {self.id} after a handler failure")
            return
        self._complete(slot, task.result())

    def _complete(self, slot: _Slot, response: object) -> None:
        slot.done = True
        if response is not None:
            header_v0 = (
                getattr(response, "__api_key__", None) == 18
            )  # ApiVersions always answers with header v0
            slot.payload = encode_response(slot.correlation_id, response, header_v0=header_v0)
        self._flush()

    def _flush(self) -> None:
        pending = self._pending
        transport = self._transport
        while pending and pending[0].done:
            slot = pending.popleft()
            if slot.payload is not None and transport is not None:
                transport.write(slot.payload)
        self._update_reading()

    def _update_reading(self) -> None:
        if self._transport is None:
            return
        should_pause = self._writing_paused or len(self._pending) >= _MAX_IN_FLIGHT
        if should_pause and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False
