"""Dispatch by API key: version checks, body decoding, and the one table of handlers."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from broker_runtime.handlers.api_versions import unsupported_version_response
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.apis import REFUSED_VERSIONS, ApiKey
from broker_runtime.protocol.framing import FrameError, decode_body

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

log = logging.getLogger(__name__)

Handler = Callable[[RequestContext, Any], Awaitable[Any]]


class Dispatcher:
    def __init__(
        self, broker: Broker, handlers: dict[int, Handler], versions: dict[int, tuple[int, int]]
    ) -> None:
        self.broker = broker
        self.handlers = handlers
        self.versions = versions
        self.connections: set = set()

    def prepare(self, ctx: RequestContext, frame: memoryview, body_pos: int) -> tuple[Any, Coroutine | None]:
        """Return (response, None) for an immediate answer or (None, coroutine) to run; raise FrameError to close."""
        header = ctx.header
        supported = self.versions.get(header.api_key)
        if supported is None:
            raise FrameError(
                f"unknown api key {header.api_key} (v{header.api_version}) from client {header.client_id!r}"
            )
        low, high = supported
        if not low <= header.api_version <= high:
            if header.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in the v0 format with our ranges so the client can fall back.
                return unsupported_version_response(self.versions), None
            raise FrameError(
                f"{ApiKey(header.api_key).name} v{header.api_version} is outside the supported {low}-{high} "
                f"(client {header.client_id!r})"
            )
        refused = REFUSED_VERSIONS.get(header.api_key)
        if refused is not None and header.api_version in refused:
            raise FrameError(
                f"{ApiKey(header.api_key).name} v{header.api_version} carries pre-v2 message formats, which this "
                f"broker does not accept (client {header.client_id!r})"
            )
        body = decode_body(header, frame, body_pos)
        return None, self.handlers[header.api_key](ctx, body)

    def request_recorder(self) -> Callable[[int, int, float], None]:
        """What records a request's latency in the broker's metrics (connections keep it: one call a request)."""
        if self.broker is None:  # tests that serve bare handlers
            return _not_recorded
        return self.broker.metrics.record_request


def _not_recorded(api_key: int, api_version: int, seconds: float) -> None:
    pass
