"""The TCP listener: accepts connections and hands each to a KafkaConnection."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from broker_runtime.server.connection import KafkaConnection
from broker_runtime.server.dispatch import Dispatcher

log = logging.getLogger(__name__)


class Listener:
    def __init__(self, dispatcher: Dispatcher, address: Any, max_request_size: int) -> None:
        self._dispatcher = dispatcher
        self._address = address
        self._max_request_size = max_request_size
        self._server: asyncio.Server | None = None
        self.port = address.port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnection(self._dispatcher, self._max_request_size),
            host=self._address.host or None,
            port=self._address.port,
            reuse_address=True,
            backlog=1024,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for conn in list(self._dispatcher.connections):
            conn.close()
        await self._server.wait_closed()
