"""What every handler receives besides its request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker_runtime.broker import Broker
    from broker_runtime.protocol.framing import RequestHeader


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    client_host: str
    connection_id: str

    @property
    def api_version(self) -> int:
        return self.header.api_version

    def response_types(self) -> Any:
        """The kio response module for this request's api and version (classes by their spec names)."""
        from broker_runtime.protocol.messages import response_module

        return response_module(self.header.api_key, self.header.api_version)
