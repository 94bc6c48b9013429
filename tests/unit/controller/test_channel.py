"""The controller's channel to a broker: a request that cannot be sent is retried after the backoff, which runs
on the controller's timers (the broker's clock in production), so this test moves time instead of waiting."""

from __future__ import annotations

import asyncio

from broker_runtime.clock import ManualClock
from broker_runtime.cluster.zk_paths import BrokerRegistration, Endpoint
from broker_runtime.controller.channel import ControllerChannel

BROKER = BrokerRegistration(1, (Endpoint("PLAINTEXT", "b1", 9092),))


class FlakyTransport:
    """Refuses the first `failures` sends; says when each send is tried, at what time."""

    def __init__(self, clock: ManualClock, failures: int) -> None:
        self.clock = clock
        self.failures = failures
        self.attempts: asyncio.Queue[int] = asyncio.Queue()

    async def send(self, broker: BrokerRegistration, request: object) -> object:
        self.attempts.put_nowait(self.clock.monotonic_ms())
        if self.failures:
            self.failures -= 1
            raise ConnectionRefusedError("broker not listening yet")
        return f"answer to {request}"

    async def forget(self, broker_id: int) -> None:
        pass


async def _timer_armed(clock: ManualClock) -> None:
    while not clock.pending_timers():
        await asyncio.sleep(0)  # let the channel's task run up to its wait


def test_a_failed_send_is_retried_when_the_backoff_has_passed_on_the_controllers_clock() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        transport = FlakyTransport(clock, failures=2)
        answers: asyncio.Queue[tuple[int, object, object]] = asyncio.Queue()
        channel = ControllerChannel(
            transport,
            lambda broker_id, request, response: answers.put_nowait((broker_id, request, response)),
            lambda delay_s, fn: clock.call_later_ms(delay_s * 1000, fn),
            retry_backoff_s=0.25,
        )
        channel.add_broker(BROKER)
        channel.send(1, "LeaderAndIsr")
        assert await transport.attempts.get() == 0
        await _timer_armed(clock)
        clock.advance(249)
        assert transport.attempts.empty() and clock.pending_timers() == 1  # still backing off
        clock.advance(1)
        assert await transport.attempts.get() == 250
        await _timer_armed(clock)
        clock.advance(250)
        assert await transport.attempts.get() == 500
        assert await answers.get() == (1, "LeaderAndIsr", "answer to LeaderAndIsr")
        await channel.close()
        assert clock.pending_timers() == 0

    asyncio.run(asyncio.wait_for(scenario(), 30))
