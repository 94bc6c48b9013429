"""One client connection: the asyncio adapter around protocol/connection.py's ServerConnection.

It moves bytes between the socket and the sans-I/O core, runs each request's handler as a task (a long-poll
Fetch must not hold up a Metadata behind it; the core keeps the responses in request order), and applies the
listener's limits: at most `_MAX_IN_FLIGHT` unanswered requests per connection, request bytes reserved from the
memory pool before they are gathered, no new request while the request queue is full, and closing after
`connections.max.idle.ms` without traffic.

Every request gets exactly one answer or its connection is closed: a handler that fails, a handler task that is
cancelled, or a response that cannot be encoded closes the connection, because the client would otherwise wait
for that answer or match a later one to it. A frame that cannot be parsed closes the connection with one WARNING
line; nothing else is touched.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING

from broker_runtime.clock import TimerHandle
from broker_runtime.errors import CloseConnection
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.apis import ApiKey
from broker_runtime.protocol.connection import Frame, ServerConnection, Slot
from broker_runtime.protocol.framing import FrameError, parse_header

if TYPE_CHECKING:
    from broker_runtime.server.listener import Listener

log = logging.getLogger(__name__)

_ids = itertools.count(1)
_MAX_IN_FLIGHT = 64  # stop reading from a client that has this many requests unanswered


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"


class KafkaConnection(asyncio.Protocol):
    def __init__(self, listener: Listener, ip: str) -> None:
        self._listener = listener
        self._dispatcher = listener.dispatcher
        self._clock = listener.clock
        self._core = ServerConnection(
            listener.max_request_size, listener.pool.try_reserve if listener.pool is not None else None
        )
        self._tasks: set[asyncio.Task] = set()
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._last_activity = self._clock.monotonic_ms()
        self._idle_timer: TimerHandle | None = None
        self.id = f"conn-{next(_ids)}"
        self.ip = ip
        self.peer = ip

    # --- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else self.ip
        self._dispatcher.connections.add(self)
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._dispatcher.connections.discard(self)
        self._listener.connection_closed(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        for task in self._tasks:
            task.cancel()
        self._release(self._core.release_all())

    def data_received(self, data: bytes) -> None:
        self._last_activity = self._clock.monotonic_ms()
        self._core.receive_data(data)
        self._take_requests()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # --- closing ------------------------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        """Close at once, dropping unsent bytes, with one WARNING line (the client broke the protocol)."""
        log.warning("%s", reason)
        self._abort()

    def close(self) -> None:
        """Close once what is already written has left."""
        if self._transport is not None:
            self._transport.close()

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
            self._transport = None  # nothing more is read, sent or dispatched; connection_lost follows

    def _arm_idle_timer(self) -> None:
        idle_ms = self._listener.idle_ms
        if idle_ms >= 0:  # Kafka: a negative connections.max.idle.ms disables the check
            due = self._last_activity + idle_ms - self._clock.monotonic_ms()
            self._idle_timer = self._clock.call_later_ms(due, self._check_idle)

    def _check_idle(self) -> None:
        if self._transport is None:
            return
        idle_for = self._clock.monotonic_ms() - self._last_activity
        if idle_for >= self._listener.idle_ms:
            log.debug("closing connection %s from %s: idle for %d ms", self.id, self.peer, idle_for)
            self.close()
        else:
            self._arm_idle_timer()

    # --- requests -----------------------------------------------------------------------------------------

    def _take_requests(self) -> None:
        """Turn buffered frames into running requests while the limits allow."""
        listener = self._listener
        try:
            while self._transport is not None and self._core.in_flight < _MAX_IN_FLIGHT:
                if listener.queue.full:
                    listener.waiters.add(self, self._take_requests)
                    break
                frame = self._core.next_frame()
                if frame is None:
                    if self._core.waiting_for_memory:
                        listener.waiters.add(self, self._take_requests)
                    break
                self._on_frame(frame)
        except FrameError as exc:
            self.abort(f"closing connection {self.id} from {self.peer}: {exc}")
        self._update_reading()

    def _on_frame(self, frame: Frame) -> None:
        try:
            header, body_pos = parse_header(frame.payload)
            ctx = RequestContext(self._dispatcher.broker, header, self.ip, self.id)
            immediate, coro = self._dispatcher.prepare(ctx, frame.payload, body_pos)
        except FrameError:
            self._release(frame.reserved)
            raise
        # Kafka keeps a request's buffer reserved while its records may be referenced: Produce until the
        # handler is done; every other request only until it is parsed.
        held = frame.reserved if header.api_key == ApiKey.PRODUCE else 0
        self._release(frame.reserved - held)
        slot = self._core.open_slot(header.correlation_id, header.api_key)
        if coro is None:
            self._dispatcher.record_request(header.api_key, header.api_version, 0.0)
            self._complete(slot, immediate)
            return
        started_ms = self._listener.clock.monotonic_ms()
        self._listener.queue.add()
        task = asyncio.get_running_loop().create_task(coro)
        # A task runs its first step in the loop iteration after its creation, before this callback: the
        # request has left the queue when its handler has started.
        asyncio.get_running_loop().call_soon(self._listener.request_started)
        self._tasks.add(task)
        task.add_done_callback(
            lambda t: self._on_done(slot, header.api_key, header.api_version, t, held, started_ms)
        )

    def _on_done(
        self, slot: Slot, api_key: int, api_version: int, task: asyncio.Task, held: int, started_ms: int
    ) -> None:
        elapsed_ms = self._listener.clock.monotonic_ms() - started_ms
        self._dispatcher.record_request(api_key, api_version, elapsed_ms / 1000)
        self._tasks.discard(task)
        self._release(held)
        if self._transport is None:
            return
        what = f"{_api_name(api_key)} v{api_version} (correlation id {slot.correlation_id})"
        if task.cancelled():
            self.abort(f"closing connection {self.id} from {self.peer}: the handler of {what} was cancelled")
            return
        exc = task.exception()
        if isinstance(exc, CloseConnection):
            log.info("closing connection %s from %s: %s", self.id, self.peer, exc)
            self.close()
            return
        if exc is not None:
            log.error("closing connection %s from %s: the handler of %s failed", self.id, self.peer, what,
                      exc_info=exc)  # fmt: skip
            self._abort()
            return
        self._complete(slot, task.result(), what)
        self._take_requests()  # an answered request makes room for buffered ones

    def _complete(self, slot: Slot, response: object, what: str = "the request") -> None:
        try:
            self._core.complete(slot, response)
        except Exception:
            log.exception("closing connection %s from %s: the response to %s cannot be encoded",
                          self.id, self.peer, what)  # fmt: skip
            self._abort()
            return
        out = self._core.data_to_send()
        if out and self._transport is not None:
            self._transport.writelines(out)
            self._last_activity = self._clock.monotonic_ms()

    def _release(self, n: int) -> None:
        if n:
            self._listener.release_memory(n)

    def _update_reading(self) -> None:
        if self._transport is None:
            return
        should_pause = (
            self._writing_paused
            or self._core.in_flight >= _MAX_IN_FLIGHT
            or self._core.waiting_for_memory
            or (self._listener.queue.full and self._core.buffered > 0)
        )
        if should_pause and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False
