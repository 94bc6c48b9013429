"""Connection limits and response delivery, as raw bytes against live brokers.

- `max.connections`: at the limit, a new connection waits in the listen backlog, unanswered, until one closes.
- `max.connections.per.ip` and its overrides: a connection over its address's limit is closed at once.
- `connections.max.idle.ms`: a connection without traffic is closed; one with traffic is not.
- `queued.max.request.bytes`: twenty connections each sending 60 MB of a declared 100 MB frame do not make the
  broker hold 1.2 GB: request bytes are reserved from the pool before they are read, and reading stops while it
  is used up.
- `queued.max.requests`: at its smallest, pipelined requests on many connections are all answered, in order.
- Every request gets exactly one answer or its connection is closed, even when its response cannot be encoded.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
import time

import psutil
import pytest

pytestmark = pytest.mark.odradek_only

ANSWER_TIMEOUT_S = 15.0


def api_versions_frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 5) + b"limit"
    return struct.pack(">i", len(body)) + body


def connect(broker, timeout: float = ANSWER_TIMEOUT_S) -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def recv_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def answers(sock: socket.socket, correlation_id: int = 1) -> bool:
    sock.sendall(api_versions_frame(correlation_id))
    return struct.unpack_from(">i", recv_frame(sock), 0)[0] == correlation_id


def closed_by_broker(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def log_line(broker, pattern: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in broker.log_text().splitlines():
            if re.search(pattern, line):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no log line matching {pattern!r}\n{broker.log_tail()}")


# --------------------------------------------------------------------------------------------------------------
# connection quotas


def test_max_connections_holds_a_new_connection_in_the_backlog_until_one_closes(broker_factory):
    broker = broker_factory(overrides={"max.connections": "3"})
    first = [connect(broker) for _ in range(3)]
    assert all(answers(s) for s in first)
    waiting = connect(broker)  # the kernel completes the handshake; the broker does not accept it yet
    waiting.sendall(api_versions_frame(7))
    waiting.settimeout(1.5)
    with pytest.raises(TimeoutError):
        waiting.recv(1)  # a broker ignoring max.connections answers in milliseconds
    first[0].close()
    waiting.settimeout(ANSWER_TIMEOUT_S)
    assert struct.unpack_from(">i", recv_frame(waiting), 0)[0] == 7
    for s in [*first[1:], waiting]:
        s.close()


def test_max_connections_per_ip_closes_the_connection_over_the_limit(broker_factory):
    broker = broker_factory(overrides={"max.connections.per.ip": "2"})
    allowed = [connect(broker) for _ in range(2)]
    assert all(answers(s) for s in allowed)
    over = connect(broker)
    assert closed_by_broker(over)
    log_line(broker, r"INFO .*Rejected connection from 127\.0\.0\.1, address already has the configured "
                     r"maximum of 2 connections")  # fmt: skip
    allowed[0].close()
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:  # the slot frees when the broker has seen the close
        again = connect(broker)
        try:
            if answers(again):
                break
        except (ConnectionError, OSError):
            assert time.monotonic() < deadline, "no connection accepted after one closed"
        again.close()
    for s in [allowed[1], again]:
        s.close()


def test_an_override_by_host_name_raises_the_limit_for_that_address(broker_factory):
    broker = broker_factory(
        overrides={"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "localhost:3"}
    )
    allowed = [connect(broker) for _ in range(3)]
    assert all(answers(s) for s in allowed)
    assert closed_by_broker(connect(broker))
    for s in allowed:
        s.close()


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(broker_factory):
    broker = broker_factory(overrides={"connections.max.idle.ms": "1000"})
    idle, busy = connect(broker), connect(broker)
    assert answers(idle) and answers(busy)
    idle.settimeout(0.2)
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    correlation_id = 1
    while True:
        try:
            if closed_by_broker(idle):
                break
        except TimeoutError:
            pass
        assert time.monotonic() < deadline, "the idle connection was never closed"
        correlation_id += 1
        assert answers(busy, correlation_id), "the busy connection was closed"
    assert answers(busy, correlation_id + 1)
    busy.close()


# --------------------------------------------------------------------------------------------------------------
# queued requests


def test_twenty_half_sent_100_mb_requests_do_not_make_the_broker_hold_them(broker_factory, raw):
    """queued.max.request.bytes = 100 MB: at most two declared 100 MB frames are admitted (Kafka's pool may
    overshoot by one request); the other connections stop being read after their first chunk."""
    broker = broker_factory(overrides={"queued.max.request.bytes": str(100 * 2**20)})
    process = psutil.Process(broker.pid)
    before = process.memory_info().rss
    declared, sent_each, piece = 100 * 2**20, 60 * 2**20, b"\x00" * 2**20
    sockets: list[socket.socket] = []
    sent = [0] * 20

    def send(i: int) -> None:
        sock = socket.create_connection((broker.host, broker.port), timeout=3)
        sockets.append(sock)
        with contextlib.suppress(OSError):  # a send blocked for 3 s: the broker stopped reading
            sock.sendall(struct.pack(">i", declared))
            while sent[i] < sent_each:
                sock.sendall(piece)
                sent[i] += len(piece)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    grown = process.memory_info().rss - before
    for sock in sockets:
        sock.close()
    assert sum(1 for n in sent if n == sent_each) <= 2, f"the broker read on: {sent}"
    assert grown < 400 * 2**20, f"broker RSS grew by {grown / 2**20:.0f} MiB holding partial requests"
    # While the pool is used up nobody's request is read, as in Kafka; once those connections close it is.
    with raw.RawClient.to(broker) as client:
        assert client.call(raw.metadata([], version=9)).brokers


def test_the_smallest_request_queue_still_answers_every_pipelined_request(broker_factory, raw):
    broker = broker_factory(overrides={"queued.max.requests": "1"})
    clients = [raw.RawClient.to(broker) for _ in range(8)]
    try:
        sent = [[c.send(raw.metadata([], version=9)) for _ in range(40)] for c in clients]
        for client, correlation_ids in zip(clients, sent, strict=True):
            got = [client.recv(type(raw.metadata([], version=9)))[0] for _ in correlation_ids]
            assert got == correlation_ids
    finally:
        for c in clients:
            c.close()


# --------------------------------------------------------------------------------------------------------------
# every request answered or its connection closed


def test_a_response_that_cannot_be_encoded_closes_the_connection(broker_factory):
    """CreateTopics v2 with a 32,760-character config value: the error message quoting it is longer than a
    v2 string can be, so the response cannot be encoded. The client must not wait forever for it."""
    broker = broker_factory()
    name, key, value = b"too-long-answer", b"retention.ms", b"x" * 32_760
    body = (
        struct.pack(">i", 1)  # topics
        + struct.pack(">h", len(name)) + name
        + struct.pack(">ihi", 1, 1, 0)  # partitions, replication factor, no assignments
        + struct.pack(">i", 1) + struct.pack(">h", len(key)) + key + struct.pack(">h", len(value)) + value
        + struct.pack(">ib", 30_000, 0)  # timeout, validate_only
    )  # fmt: skip
    header = struct.pack(">hhih", 19, 2, 5, 5) + b"limit"
    with connect(broker) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body + api_versions_frame(6))
        assert closed_by_broker(sock), "the broker answered a request it could not encode"
    log_line(broker, r"ERROR .*the response to CREATE_TOPICS v2 \(correlation id 5\) cannot be encoded")
    assert broker.alive
    with connect(broker) as sock:
        assert answers(sock)
