"""The TCP listener: accepts connections within the connection quotas and hands each to a KafkaConnection.

Accepting is one loop, as Kafka's Acceptor: while `max.connections` are open it waits for one to close (new
connections wait in the listen backlog); a connection from an address already at `max.connections.per.ip` (or
its override) is closed as soon as it is accepted, with an INFO line. The listener also owns what its
connections share: the request memory pool (`queued.max.request.bytes`), the request queue
(`queued.max.requests`) and the connections waiting for either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING, Any

from broker_runtime.clock import Clock
from broker_runtime.config import BrokerConfig, parse_ip_overrides
from broker_runtime.server.connection import KafkaConnection
from broker_runtime.server.limits import ConnectionQuotas, MemoryPool, RequestQueue, Waiters

if TYPE_CHECKING:
    from broker_runtime.server.dispatch import Dispatcher

log = logging.getLogger(__name__)

_BACKLOG = 1024
_QUOTA_KEYS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides")


class Listener:
    def __init__(self, dispatcher: Dispatcher, address: Any, config: BrokerConfig, clock: Clock) -> None:
        self.dispatcher = dispatcher
        self.clock = clock
        self._address = address
        self._config = config
        self.max_request_size: int = config["socket.request.max.bytes"]
        self.idle_ms: int = config["connections.max.idle.ms"]
        queued_bytes = config["queued.max.request.bytes"]
        self.pool = MemoryPool(queued_bytes) if queued_bytes > 0 else None
        self.queue = RequestQueue(config["queued.max.requests"])
        self.waiters = Waiters()
        self.quotas = ConnectionQuotas(*self._quota_settings())
        self._slot_freed = asyncio.Event()
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self.port = address.port
        config.add_change_listener(self._on_config_change)

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._socket = _listen_socket(self._address.host, self._address.port)
        self.port = self._socket.getsockname()[1]
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(), name="listener-accept")

    async def stop(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        if self._socket is not None:
            self._socket.close()
        for conn in list(self.dispatcher.connections):
            conn.close()

    # --- accepting ----------------------------------------------------------------------------------------

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._socket is not None
        while True:
            while not self.quotas.slot_available:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            sock, peer = await loop.sock_accept(self._socket)
            ip = _ip(peer[0])
            if not self.quotas.try_add(ip):
                log.info(
                    "Rejected connection from %s, address already has the configured maximum of %d connections.",
                    ip, self.quotas.limit_for(ip),
                )  # fmt: skip
                sock.close()
                continue
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                await loop.connect_accepted_socket(lambda ip=ip: KafkaConnection(self, ip), sock)
            except OSError as exc:
                log.info("connection from %s failed while being set up: %s", ip, exc)
                self.quotas.remove(ip)
                sock.close()

    def connection_closed(self, conn: KafkaConnection) -> None:
        self.waiters.discard(conn)
        self.quotas.remove(conn.ip)
        self._slot_freed.set()

    def _quota_settings(self) -> tuple[int, int, dict[str, int]]:
        config = self._config
        overrides = parse_ip_overrides(config["max.connections.per.ip.overrides"] or "")
        return config["max.connections"], config["max.connections.per.ip"], overrides

    def _on_config_change(self, key: str) -> None:
        if key in _QUOTA_KEYS:
            self.quotas.configure(*self._quota_settings())
            self._slot_freed.set()

    # --- shared by the connections ----------------------------------------------------------------------

    def release_memory(self, n: int) -> None:
        assert self.pool is not None
        if self.pool.release(n):
            self.waiters.resume_all()

    def requests_started(self, count: int) -> None:
        if self.queue.remove(count):
            self.waiters.resume_all()


def _ip(address: str) -> str:
    """IPv4 clients of a dual-stack socket appear as ::ffff:a.b.c.d; count them by their IPv4 address."""
    return address[7:] if address.startswith("::ffff:") else address


def _listen_socket(host: str | None, port: int) -> socket.socket:
    if not host:  # every interface
        if socket.has_dualstack_ipv6():
            sock = socket.create_server(
                ("", port), family=socket.AF_INET6, backlog=_BACKLOG, dualstack_ipv6=True
            )
        else:
            sock = socket.create_server(("", port), backlog=_BACKLOG)
    else:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.create_server(address, family=family, backlog=_BACKLOG)
    sock.setblocking(False)
    return sock
