"""How the controller's requests reach brokers (Kafka's ControllerChannelManager): one FIFO queue and one
sender task per live broker, so requests to a broker arrive in the order the controller decided them, and a
slow or dead broker delays nobody else. A request that fails to send is retried until it is answered or the
broker leaves the cluster (its queue is dropped then; the broker gets a full picture when it registers again).
Every response goes back to the controller as an event. The wait between retries runs on the controller's timers
(its scheduler, the broker's clock in production), so a test drives it without sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from broker_runtime.cluster.zk_paths import BrokerRegistration

log = logging.getLogger(__name__)


class BrokerTransport(Protocol):
    """Sends one request to a broker and returns its response; raises OSError (or ConnectionError,
    TimeoutError) when the broker cannot be reached. `forget` drops any connection to that broker."""

    async def send(self, broker: BrokerRegistration, request: Any) -> Any: ...
    async def forget(self, broker_id: int) -> None: ...


ResponseHandler = Callable[[int, Any, Any], None]  # (broker id, request, response)
Scheduler = Callable[
    [float, Callable[[], None]], Any
]  # the controller's: (delay s, callback) -> handle with .cancel()


class _BrokerQueue:
    def __init__(self, reg: BrokerRegistration) -> None:
        self.reg = reg
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.task: asyncio.Task | None = None


class ControllerChannel:
    def __init__(
        self,
        transport: BrokerTransport,
        on_response: ResponseHandler,
        scheduler: Scheduler,
        retry_backoff_s: float = 0.1,
    ):
        self.transport = transport
        self.on_response = on_response
        self.scheduler = scheduler
        self.retry_backoff_s = retry_backoff_s
        self._brokers: dict[int, _BrokerQueue] = {}
        self._forgetting: set[asyncio.Future] = set()

    def add_broker(self, reg: BrokerRegistration) -> None:
        if reg.broker_id in self._brokers:
            return
        entry = _BrokerQueue(reg)
        entry.task = asyncio.create_task(self._send_loop(entry), name=f"controller-to-broker-{reg.broker_id}")
        self._brokers[reg.broker_id] = entry

    def remove_broker(self, broker_id: int) -> None:
        entry = self._brokers.pop(broker_id, None)
        if entry is not None and entry.task is not None:
            entry.task.cancel()
            forget = asyncio.ensure_future(self.transport.forget(broker_id))
            self._forgetting.add(forget)
            forget.add_done_callback(self._forgetting.discard)

    def send(self, broker_id: int, request: Any) -> None:
        entry = self._brokers.get(broker_id)
        if entry is None:
            log.debug("not sending %s to broker %d: not a live broker", type(request).__name__, broker_id)
            return
        entry.queue.put_nowait(request)

    async def close(self) -> None:
        entries, self._brokers = list(self._brokers.values()), {}
        for entry in entries:
            if entry.task is not None:
                entry.task.cancel()
        for entry in entries:
            if entry.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await entry.task
            await self.transport.forget(entry.reg.broker_id)

    async def _send_loop(self, entry: _BrokerQueue) -> None:
        while entry is self._brokers.get(entry.reg.broker_id):
            request = await entry.queue.get()
            failures = 0
            while True:
                try:
                    response = await self.transport.send(entry.reg, request)
                    break
                except (OSError, ConnectionError, TimeoutError, EOFError) as exc:
                    failures += 1
                    if failures == 1 or failures % 50 == 0:
                        log.warning(
                            "cannot send %s to broker %d (%r); retrying", type(request).__name__,
                            entry.reg.broker_id, exc,
                        )  # fmt: skip
                    await self._backoff()
            try:
                self.on_response(entry.reg.broker_id, request, response)
            except Exception:
                log.exception("handling a response from broker %d failed", entry.reg.broker_id)

    async def _backoff(self) -> None:
        """Wait `retry_backoff_s` on the controller's timers."""
        waker = asyncio.get_running_loop().create_future()
        timer = self.scheduler(self.retry_backoff_s, lambda: waker.done() or waker.set_result(None))
        try:
            await waker
        finally:
            timer.cancel()
