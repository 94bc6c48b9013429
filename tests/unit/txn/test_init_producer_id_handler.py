"""InitProducerId without a transactional id when no producer-id block can be allocated."""

from __future__ import annotations

import asyncio
import datetime

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.static.primitive import i16, i32Timedelta, i64

from broker_runtime.broker import Broker
from broker_runtime.clock import ManualClock
from broker_runtime.config import BrokerConfig
from broker_runtime.handlers.context import RequestContext
from broker_runtime.handlers.transactions import handle_init_producer_id
from broker_runtime.protocol.framing import RequestHeader
from broker_runtime.txn.producer_ids import ProducerIdManager


def test_an_idempotent_producer_is_answered_an_error_when_no_id_block_can_be_allocated(tmp_path) -> None:
    async def unreachable_store(size: int) -> int:
        raise ConnectionError("metadata store unreachable")

    async def scenario() -> None:
        config = BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"})
        broker = Broker(config, clock=ManualClock())
        await broker.start()
        try:
            broker.producer_ids = ProducerIdManager(unreachable_store)
            ctx = RequestContext(broker, RequestHeader(22, 4, 1, "test"), "127.0.0.1", "conn-test")
            request = InitProducerIdRequest(
                transactional_id=None, transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
                producer_id=i64(-1), producer_epoch=i16(-1),
            )  # fmt: skip
            response = await handle_init_producer_id(ctx, request)
            assert response.error_code == ErrorCode.coordinator_not_available
            assert response.producer_id == -1
        finally:
            await broker.stop()

    asyncio.run(scenario())
