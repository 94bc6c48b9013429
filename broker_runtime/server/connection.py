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

Produce, the hot path, skips the task when it can: its handler's first step runs as the request is taken, and a
produce that appends on the event loop is answered then; one that awaits (acks=-1, a batch checked on a worker
thread) goes on in a task from where it stopped. The answers to the requests of one read leave in one send.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING

from broker_runtime.clock import TimerHandle
from broker_runtime.errors import CloseConnection
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.apis import ApiKey
from broker_runtime.protocol.connection import Frame, ServerConnection, Slot
from broker_runtime.protocol.framing import FrameError, RequestHeader, frame_chunks, parse_header

if TYPE_CHECKING:
    from broker_runtime.server.listener import Listener

log = logging.getLogger(__name__)

_ids = itertools.count(1)
_MAX_IN_FLIGHT = 64  # stop reading from a client that has this many requests unanswered
_PRODUCE = int(ApiKey.PRODUCE)


# APIs whose handler's first step runs as the request is taken (see _on_frame). Their handlers must not need to
# be in a task for that step (no asyncio.current_task(), asyncio.timeout()).
_EAGER = frozenset({_PRODUCE})


class _Resumed(Coroutine):
    """A coroutine whose first step ran outside a task and yielded `awaiting` (a future, or None for a bare
    yield), for a task to run from there: its first step hands out `awaiting`, and from then on it is the
    coroutine itself (what a task sends or throws in goes to it, a cancellation before that step too)."""

    __slots__ = ("_awaiting", "_coro", "_started")

    def __init__(self, coro: Coroutine, awaiting: object) -> None:
        self._coro = coro
        self._awaiting = awaiting
        self._started = False

    def send(self, value: object) -> object:
        if not self._started:
            self._started = True
            awaiting, self._awaiting = self._awaiting, None
            return awaiting
        return self._coro.send(value)

    def throw(self, exc, value=None, traceback=None) -> object:  # type: ignore[override]
        self._started = True
        self._awaiting = None
        if value is None and traceback is None:
            return self._coro.throw(exc)
        return self._coro.throw(exc, value, traceback)

    def close(self) -> None:
        self._coro.close()

    def __next__(self) -> object:
        return self.send(None)

    def __await__(self) -> _Resumed:
        return self


def _what(header: RequestHeader) -> str:
    """A request, as log lines name it."""
    try:
        name = ApiKey(header.api_key).name
    except ValueError:
        name = f"api {header.api_key}"
    return f"{name} v{header.api_version} (correlation id {header.correlation_id})"


class KafkaConnection(asyncio.Protocol):
    def __init__(self, listener: Listener, ip: str) -> None:
        self._listener = listener
        self._dispatcher = listener.dispatcher
        self._record_request = listener.dispatcher.request_recorder()
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
        self._last_activity = now_ms = self._clock.monotonic_ms()
        self._core.receive_data(data)
        self._take_requests(now_ms)

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

    def _take_requests(self, now_ms: int | None = None) -> None:
        """Turn buffered frames into running requests while the limits allow. `now_ms`: the clock's time, when
        the caller has just read it (a request's time is counted from when it is taken)."""
        listener = self._listener
        queue = listener.queue
        core = self._core
        if now_ms is None:
            now_ms = self._clock.monotonic_ms()
        started = 0
        try:
            while self._transport is not None and core.in_flight < _MAX_IN_FLIGHT:
                if queue.full:
                    listener.waiters.add(self, self._take_requests)
                    break
                frame = core.next_frame()
                if frame is None:
                    if core.waiting_for_memory:
                        listener.waiters.add(self, self._take_requests)
                    break
                started += self._on_frame(frame, now_ms)
        except FrameError as exc:
            self._flush(now_ms)  # the requests before the bad frame keep their answers
            self.abort(f"closing connection {self.id} from {self.peer}: {exc}")
        if started:
            # A task runs its first step in the loop iteration after its creation, before this callback: the
            # requests have left the queue when their handlers have started. One callback for all of them.
            asyncio.get_running_loop().call_soon(listener.requests_started, started)
        self._flush(now_ms)  # the requests answered at once leave together: one send for all of them
        self._update_reading()

    def _on_frame(self, frame: Frame, now_ms: int) -> bool:
        """Start the frame's request; True when its handler became a task (it holds a place in the queue)."""
        reserved = frame.reserved
        try:
            header, body_pos = parse_header(frame.payload)
            ctx = RequestContext(self._dispatcher.broker, header, self.ip, self.id)
            immediate, coro = self._dispatcher.prepare(ctx, frame.payload, body_pos)
        except FrameError:
            self._release(reserved)
            raise
        # Kafka keeps a request's buffer reserved while its records may be referenced: Produce until the
        # handler is done; every other request only until it is parsed.
        held = 0
        if reserved:
            held = reserved if header.api_key == _PRODUCE else 0
            self._release(reserved - held)
        slot = self._core.open_slot(header.correlation_id, header.api_key)
        if coro is None:
            self._record_request(header.api_key, header.api_version, 0.0)
            self._complete(slot, immediate, header)
            return False
        if header.api_key in _EAGER:
            # Run the handler's first step now: a Produce that appends on the loop (acks 0 or 1, batches
            # checked inline) is done by then and needs no task. One that awaits goes on in a task from there.
            try:
                awaiting = coro.send(None)
            except StopIteration as done:
                self._answer(slot, header, held, now_ms, done.value, None, more=False)
                return False
            except (Exception, asyncio.CancelledError) as exc:
                self._answer(slot, header, held, now_ms, None, exc, more=False)
                return False
            coro = _Resumed(coro, awaiting)
        self._listener.queue.add()
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._on_done(slot, header, t, held, now_ms))
        return True

    def _on_done(
        self, slot: Slot, header: RequestHeader, task: asyncio.Task, held: int, started_ms: int
    ) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            self._answer(slot, header, held, started_ms, None, asyncio.CancelledError())
        elif (exc := task.exception()) is not None:
            self._answer(slot, header, held, started_ms, None, exc)
        else:
            self._answer(slot, header, held, started_ms, task.result(), None)

    def _answer(
        self,
        slot: Slot,
        header: RequestHeader,
        held: int,
        started_ms: int,
        response: object,
        exc: BaseException | None,
        *,
        more: bool = True,
    ) -> None:
        """A handler's outcome: its response, or what it raised. `more`: take buffered requests after it (not
        when answering from inside `_take_requests`)."""
        now_ms = self._clock.monotonic_ms()
        self._record_request(header.api_key, header.api_version, (now_ms - started_ms) / 1000)
        if held:
            self._release(held)
        if self._transport is None:
            return
        if exc is not None:
            self._flush(now_ms)  # the requests before this one keep their answers
            if isinstance(exc, asyncio.CancelledError):
                self.abort(f"closing connection {self.id} from {self.peer}: the handler of {_what(header)} "
                           "was cancelled")  # fmt: skip
            elif isinstance(exc, CloseConnection):
                log.info("closing connection %s from %s: %s", self.id, self.peer, exc)
                self.close()
            else:
                log.error("closing connection %s from %s: the handler of %s failed", self.id, self.peer,
                          _what(header), exc_info=exc)  # fmt: skip
                self._abort()
            return
        self._complete(slot, response, header)
        if more:
            self._flush(now_ms)
            # An answered request makes room for buffered ones, or lets a paused connection read again.
            if self._reading_paused or self._core.buffered:
                self._take_requests(now_ms)

    def _complete(self, slot: Slot, response: object, header: RequestHeader) -> None:
        """Encode the response into its slot; `_flush` sends it when the requests before it are answered."""
        try:
            self._core.complete(slot, response)
        except Exception:
            log.exception("closing connection %s from %s: the response to %s cannot be encoded",
                          self.id, self.peer, _what(header))  # fmt: skip
            self._flush(self._clock.monotonic_ms())  # the requests before this one keep their answers
            self._abort()

    def _flush(self, now_ms: int) -> None:
        out = self._core.data_to_send()
        if out and self._transport is not None:
            if len(out) == 1 and not isinstance(out[0], tuple):
                self._transport.write(out[0])
            else:  # small answers in one send, a large part (a follower's records) in its own
                chunks = (
                    c for payload in out for c in (payload if isinstance(payload, tuple) else (payload,))
                )
                for chunk in frame_chunks(chunks):
                    self._transport.write(chunk)
            self._last_activity = now_ms

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
