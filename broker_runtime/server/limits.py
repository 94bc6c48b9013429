"""The limits a listener applies to connections and queued requests, as Kafka's SocketServer does. Plain state,
no I/O: the listener and its connections act on the answers.

- `ConnectionQuotas` (Kafka's ConnectionQuotas): `max.connections` bounds the broker's connections — at the
  limit the listener stops accepting and new connections wait in the listen backlog until one closes;
  `max.connections.per.ip` and `max.connections.per.ip.overrides` bound the connections of one address — a
  connection over its address's limit is closed as soon as it is accepted.
- `MemoryPool` (Kafka's SimpleMemoryPool, non-strict, for `queued.max.request.bytes`): a request's declared size
  is reserved before its bytes are gathered; a reservation succeeds while any memory is left, so the pool
  overshoots by at most one request, and nothing is granted while it is exhausted. Connections that were refused
  stop reading and are resumed when released memory makes the pool available again.
- `RequestQueue` (`queued.max.requests`): requests read off the sockets whose handler has not started yet. At
  the limit every connection stops taking requests until handlers catch up, as Kafka's network threads block on
  a full request channel.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class ConnectionQuotas:
    def __init__(self, max_connections: int, max_per_ip: int, overrides: Mapping[str, int]) -> None:
        self.total = 0
        self._counts: dict[str, int] = {}
        self.configure(max_connections, max_per_ip, overrides)

    def configure(self, max_connections: int, max_per_ip: int, overrides: Mapping[str, int]) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        # Kafka resolves override hosts once, when the config is read (InetAddress.getByName).
        self._overrides = {_address(host): count for host, count in overrides.items()}

    def limit_for(self, ip: str) -> int:
        return self._overrides.get(ip, self.max_per_ip)

    @property
    def slot_available(self) -> bool:
        return self.total < self.max_connections

    def try_add(self, ip: str) -> bool:
        """Count a new connection from `ip`; False (nothing counted) when its address is at its limit."""
        count = self._counts.get(ip, 0)
        if count >= self.limit_for(ip):
            return False
        self._counts[ip] = count + 1
        self.total += 1
        return True

    def remove(self, ip: str) -> None:
        count = self._counts.get(ip, 0)
        if count <= 1:
            self._counts.pop(ip, None)
        else:
            self._counts[ip] = count - 1
        self.total -= 1


def _address(host: str) -> str:
    """An override's host as the address connections come from: IP literals as they are, names resolved as
    Java's InetAddress.getByName does by default (IPv4 first)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError:
        try:
            return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
        except OSError:
            log.warning("max.connections.per.ip.overrides: cannot resolve %r; it applies to nobody", host)
            return host


class MemoryPool:
    def __init__(self, size: int) -> None:
        self.size = size
        self.available = size

    def try_reserve(self, n: int) -> bool:
        if self.available <= 0:
            return False
        self.available -= n
        return True

    def release(self, n: int) -> bool:
        """Return `n` bytes; True when that ends an exhaustion (refused readers may try again)."""
        was_exhausted = self.available <= 0
        self.available += n
        return was_exhausted and self.available > 0


class RequestQueue:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queued = 0

    @property
    def full(self) -> bool:
        return self.queued >= self.limit

    def add(self) -> None:
        self.queued += 1

    def remove(self, count: int = 1) -> bool:
        """Queued requests' handlers started; True when that makes room after the queue was full."""
        was_full = self.full
        self.queued -= count
        return was_full and not self.full


class Waiters:
    """Connections that stopped reading for want of pool memory or queue room, resumed together (Kafka unmutes
    every such channel once memory is available again)."""

    def __init__(self) -> None:
        self._waiting: dict[object, Callable[[], None]] = {}

    def add(self, key: object, resume: Callable[[], None]) -> None:
        self._waiting[key] = resume

    def discard(self, key: object) -> None:
        self._waiting.pop(key, None)

    def resume_all(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for resume in waiting.values():
            resume()
