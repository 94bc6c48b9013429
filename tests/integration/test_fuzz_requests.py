"""Malformed, truncated, oversized and random requests against a live broker (hypothesis, bounded), including
bodies shaped by every served API's request schema whose length fields lie and whose fields are null where the
schema forbids it.

After every example: the broker process is alive, a fresh connection answers ApiVersions, a raw produce/fetch
round trip works, and a connection opened before the fuzzing (the sentinel) still answers. Requests are built with
kio (Kafka's own message specs) and sent on plain sockets, so nothing in between repairs them.

Also: pipelined requests on one connection are answered in request order even when an earlier Fetch long-polls,
and well-formed requests carrying bad record batches get Kafka's error codes.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import UnknownAPIKey, UnknownEntity
from request_bytes import request_body

from broker_runtime.protocol.framing import request_class

MAX_REQUEST_BYTES = 1 << 20  # socket.request.max.bytes on the fuzzed broker (Tansu: its own default)
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=False,
    database=None,
)

# Kafka error codes
NONE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION = 0, 2, 3
UNSUPPORTED_VERSION, INVALID_RECORD = 35, 87


# --------------------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def fuzz_broker(broker_logs_dir, helpers):
    overrides = (
        {}
        if helpers.TARGET == "tansu"
        else {
            "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
            "auto.create.topics.enable": "false",
        }
    )
    broker = helpers.new_broker(broker_logs_dir, "fuzz", overrides)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(autouse=True)
def _show_fuzz_broker_log(request, fuzz_broker, helpers):
    helpers.remember_broker(request, fuzz_broker)
    if not fuzz_broker.alive:
        pytest.fail(f"the fuzzed broker died before this test\n{fuzz_broker.log_tail()}")


@pytest.fixture(scope="module")
def fuzz_topic(fuzz_broker, clients, helpers):
    name = helpers.make_topic_name("fuzz")
    clients.create_topic(fuzz_broker.bootstrap, name, 1)
    return name


@pytest.fixture
def health(fuzz_broker, fuzz_topic, raw, clients, helpers):
    """``health()`` asserts the broker is fine: alive, fresh connection ApiVersions, raw produce + fetch of a
    new record, the sentinel connection (opened when the test started) still answering."""
    sentinel = raw.RawClient.to(fuzz_broker)
    sentinel.call(raw.api_versions(0))
    adv = helpers.api_versions_probe(fuzz_broker.host, fuzz_broker.port)
    produce_v = raw.pick_version(adv, 0, [8, 7, 9, 3])
    fetch_v = raw.pick_version(adv, 1, [11, 10, 4])
    counter = [0]

    def check(context: str = "") -> None:
        assert fuzz_broker.alive, f"broker died {context}\n{fuzz_broker.log_tail()}"
        table = helpers.api_versions_probe(fuzz_broker.host, fuzz_broker.port)
        assert 0 in table and 1 in table, table
        counter[0] += 1
        value = b"health-%d-%f" % (counter[0], time.time())
        with raw.RawClient.to(fuzz_broker) as c:
            err, base = raw.produce_result(
                c.call(
                    raw.produce(fuzz_topic, 0, raw.build_batch([clients.Rec(b"h", value)]), version=produce_v)
                )
            )
            assert err == NONE, f"health produce failed with error {err} {context}"
            err, hw, records = raw.fetch_result(c.call(raw.fetch(fuzz_topic, 0, base, version=fetch_v)))
            assert err == NONE and hw == base + 1
            batches = raw.parse_batches(records)
            assert batches and batches[0]["records"][0].value == value
        resp = sentinel.call(raw.api_versions(0))
        assert int(resp.error_code) == NONE, f"sentinel connection broken {context}"

    yield check
    check("at the end of the test")
    sentinel.close()


def drain(sock: socket.socket, timeout: float = 2.0) -> tuple[bytes, bool]:
    """Read what the broker sends until it closes the connection or ``timeout`` passes.
    Returns (bytes, closed)."""
    sock.settimeout(0.2)
    data = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return bytes(data), True
        if not chunk:
            return bytes(data), True
        data += chunk
    return bytes(data), False


def first_answer_or_close(sock: socket.socket, timeout: float) -> bytes | None:
    """One response frame, or None when the broker closes the connection or stays silent for `timeout`."""
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except (TimeoutError, ConnectionResetError):
        return None
    return data


def throw(broker, payload: bytes, half_close: bool = True, timeout: float = 2.0) -> tuple[bytes, bool]:
    """Send ``payload`` on a fresh connection, optionally half-close, and collect the reaction."""
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        try:
            s.sendall(payload)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (ConnectionResetError, BrokenPipeError):
            return b"", True
        return drain(s, timeout)


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def header_v1(
    api_key: int, version: int, correlation_id: int = 1, client_id: bytes | None = b"fuzz"
) -> bytes:
    cid = struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    return struct.pack(">hhi", api_key, version, correlation_id) + cid


# --------------------------------------------------------------------------------------------------------------
# fuzzing


@FUZZ
@given(body=st.binary(min_size=0, max_size=4096))
def test_random_frames(fuzz_broker, health, body):
    throw(fuzz_broker, frame(body))
    health("after a random frame")


@FUZZ
@given(data=st.binary(min_size=1, max_size=64))
def test_random_bytes_without_framing(fuzz_broker, health, data):
    throw(fuzz_broker, data)
    health("after unframed random bytes")


@FUZZ
@given(data=st.data())
def test_valid_header_garbage_body(fuzz_broker, health, helpers, data):
    table = helpers.api_versions_probe(fuzz_broker.host, fuzz_broker.port)
    api_key = data.draw(st.sampled_from(sorted(table)), label="api_key")
    lo, hi = table[api_key]
    version = data.draw(st.integers(lo, hi), label="version")
    flexible_header = data.draw(st.booleans(), label="tagged header byte")
    body = data.draw(st.binary(max_size=512), label="body")
    head = header_v1(api_key, version) + (b"\x00" if flexible_header else b"")
    throw(fuzz_broker, frame(head + body))
    health(f"after api {api_key} v{version} with a garbage body")


@FUZZ
@given(data=st.data())
def test_schema_shaped_requests_with_lying_lengths_and_nulls(fuzz_broker, health, helpers, data):
    """Bodies drawn along each served API's own request schema, where length fields (compact or legacy arrays,
    strings, bytes, tagged-field sizes) lie: huge, negative, one off either way, or null where the schema does
    not allow it, at any depth. Flexible versions are drawn half of the time when the API has them."""
    table = helpers.api_versions_probe(fuzz_broker.host, fuzz_broker.port)
    api_key = data.draw(st.sampled_from(sorted(table)), label="api_key")
    lo, hi = table[api_key]
    versions = [v for v in range(lo, hi + 1) if _request_schema(api_key, v) is not None]
    flexible = [v for v in versions if _request_schema(api_key, v).__flexible__]
    pool = flexible if flexible and data.draw(st.booleans(), label="flexible") else versions
    version = data.draw(st.sampled_from(pool), label="version")
    cls = _request_schema(api_key, version)
    mutate = data.draw(st.sampled_from([0.0, 0.05, 0.25]), label="mutate")
    body, lies = data.draw(request_body(cls, mutate=mutate), label="body")
    head = header_v1(api_key, version) + (b"\x00" if cls.__flexible__ else b"")
    mark = len(fuzz_broker.log_text())
    with socket.create_connection((fuzz_broker.host, fuzz_broker.port), timeout=5) as sock:
        # No half-close: the broker closes on EOF, before handlers answer. One answer, a close, or (acks=0
        # Produce, a long poll) silence.
        sock.sendall(frame(head + body))
        first_answer_or_close(sock, timeout=2.0)
    health(f"after {cls.__name__} v{version} with lies {lies}")
    errors = [line for line in fuzz_broker.log_text()[mark:].splitlines() if " ERROR " in line]
    assert errors == [], f"{cls.__name__} v{version} with lies {lies}: the broker logged an error"


def _request_schema(api_key: int, version: int):
    try:
        return request_class(api_key, version)  # kio's schemas and the controller's requests
    except (UnknownAPIKey, UnknownEntity):
        return None


@FUZZ
@given(
    api_key=st.integers(-(2**15), 2**15 - 1),
    version=st.integers(-(2**15), 2**15 - 1),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
)
def test_unknown_api_keys_and_versions(fuzz_broker, health, helpers, api_key, version, correlation_id):
    table = helpers.api_versions_probe(fuzz_broker.host, fuzz_broker.port)
    if api_key in table and table[api_key][0] <= version <= table[api_key][1]:
        api_key = 32000  # make it unknown
    data, _closed = throw(fuzz_broker, frame(header_v1(api_key, version, correlation_id)))
    if api_key == 18:
        # KIP-511: an ApiVersions request at an unknown version gets a v0-shaped UNSUPPORTED_VERSION answer
        assert len(data) >= 4 + 4 + 2, f"no answer to ApiVersions v{version}"
        corr, error_code = struct.unpack_from(">ih", data, 4)
        assert (corr, error_code) == (correlation_id, UNSUPPORTED_VERSION)
    health(f"after api {api_key} v{version}")


@FUZZ
@given(
    cut=st.floats(0.0, 1.0, exclude_max=True),
    fix_length=st.booleans(),
    which=st.sampled_from(["metadata", "produce"]),
)
def test_truncated_requests(fuzz_broker, fuzz_topic, health, raw, clients, cut, fix_length, which):
    if which == "metadata":
        req = raw.metadata([fuzz_topic, "another-topic"], version=8)
    else:
        req = raw.produce(fuzz_topic, 0, raw.build_batch(clients.sample_records(big=False)), version=8)
    body = _encode(raw, req)
    n = int(len(body) * cut)
    # a complete frame whose body ends early, or the frame itself cut off (then EOF)
    payload = frame(body[:n]) if fix_length else struct.pack(">i", len(body)) + body[:n]
    throw(fuzz_broker, payload)
    health(f"after {which} cut at {n}/{len(body)} (length {'fixed' if fix_length else 'kept'})")


def _encode(raw, request) -> bytes:
    client = object.__new__(raw.RawClient)
    client.client_id = "fuzz"
    return raw.RawClient.encode(client, request, 7)


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=8))
def test_bit_flipped_produce(fuzz_broker, fuzz_topic, health, raw, clients, flips):
    body = bytearray(
        _encode(raw, raw.produce(fuzz_topic, 0, raw.build_batch(clients.sample_records(big=False))))
    )
    for pos, mask in flips:
        body[pos % len(body)] ^= mask
    data, _closed = throw(fuzz_broker, frame(bytes(body)))
    if data:
        # whatever came back must be one well-formed frame answering correlation id 7 (or a mangled id)
        (size,) = struct.unpack_from(">i", data, 0)
        assert size == len(data) - 4
    health("after a bit-flipped Produce")
    # what the partition holds is still readable
    with raw.RawClient.to(fuzz_broker) as c:
        err, _hw, _records = raw.fetch_result(c.call(raw.fetch(fuzz_topic, 0, 0)))
        assert err == NONE


def test_oversized_and_bad_length_frames(fuzz_broker, health, broker_target):
    for size in (MAX_REQUEST_BYTES + 1, 2**31 - 1, -1, -(2**31), 0, 1, 3):
        with socket.create_connection((fuzz_broker.host, fuzz_broker.port), timeout=5) as s:
            s.sendall(struct.pack(">i", size))
            if size > MAX_REQUEST_BYTES:
                # Kafka refuses a frame larger than socket.request.max.bytes as soon as it reads the size:
                # the connection closes without the body ever being sent (or memory allocated for it)
                _data, closed = drain(s, timeout=5.0)
                assert closed, f"size {size}: connection stays open after an oversized length prefix"
            else:
                s.shutdown(socket.SHUT_WR)
                drain(s, timeout=2.0)
        health(f"after a frame of length {size}")


def test_many_garbage_connections_at_once(fuzz_broker, health):
    def worker(i: int) -> None:
        with contextlib.suppress(OSError):
            throw(fuzz_broker, frame(bytes([i % 256]) * (i * 37 % 900)), timeout=1.0)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    health("after 40 concurrent garbage connections")


# --------------------------------------------------------------------------------------------------------------
# well-formed requests with bad contents: Kafka's error codes


def test_produce_bad_batches_get_error_codes(fuzz_broker, fuzz_topic, health, raw, clients):
    good = bytearray(raw.build_batch([clients.Rec(b"k", b"v")]))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF  # payload changed, CRC not
    magic1 = bytearray(good)
    magic1[16] = 1  # magic byte (offset 8 + 4 + 4)
    with raw.RawClient.to(fuzz_broker) as c:
        _, hw_before, _ = raw.fetch_result(c.call(raw.fetch(fuzz_topic, 0, 0)))
        err, _ = raw.produce_result(c.call(raw.produce(fuzz_topic, 0, bytes(bad_crc))))
        assert err == CORRUPT_MESSAGE
        err, _ = raw.produce_result(c.call(raw.produce(fuzz_topic, 0, bytes(magic1))))
        assert err in (CORRUPT_MESSAGE, INVALID_RECORD, 43), err  # 43 = UNSUPPORTED_FOR_MESSAGE_FORMAT
        err, _ = raw.produce_result(c.call(raw.produce(fuzz_topic, 7, bytes(good))))
        assert err == UNKNOWN_TOPIC_OR_PARTITION
        err, _ = raw.produce_result(c.call(raw.produce(fuzz_topic + "-missing", 0, bytes(good))))
        assert err == UNKNOWN_TOPIC_OR_PARTITION
        _, hw_after, _ = raw.fetch_result(c.call(raw.fetch(fuzz_topic, 0, 0)))
        assert hw_after == hw_before, "a rejected batch changed the log"
    health()


# --------------------------------------------------------------------------------------------------------------
# ordering


def test_pipelined_responses_keep_request_order_behind_a_long_poll(
    fuzz_broker, fuzz_topic, health, raw, clients
):
    """Fetch (long poll at the log end) first, then ApiVersions and Metadata on the same connection: the answers
    leave in request order, so the quick ones wait for the Fetch; a produce from elsewhere wakes the Fetch."""
    with raw.RawClient.to(fuzz_broker, timeout=30) as c:
        _, hw, _ = raw.fetch_result(c.call(raw.fetch(fuzz_topic, 0, 0)))
        fetch_req = raw.fetch(fuzz_topic, 0, hw, max_wait_ms=15_000, min_bytes=1)
        sent = [
            (c.send(fetch_req), type(fetch_req)),
            (c.send(raw.api_versions(0)), type(raw.api_versions(0))),
            (c.send(raw.metadata([fuzz_topic])), type(raw.metadata([fuzz_topic]))),
            (c.send(raw.api_versions(0)), type(raw.api_versions(0))),
        ]
        # nothing may come back while the Fetch is parked: the later answers are queued behind it
        c.sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            c.sock.recv(1, socket.MSG_PEEK)
        c.sock.settimeout(30)
        value = b"wake-the-fetch"
        with raw.RawClient.to(fuzz_broker) as other:
            err, base = raw.produce_result(
                other.call(raw.produce(fuzz_topic, 0, raw.build_batch([clients.Rec(None, value)])))
            )
            assert err == NONE and base == hw
        t0 = time.monotonic()
        answers = [c.recv(req_type) for _, req_type in sent]
        elapsed = time.monotonic() - t0
        assert [corr for corr, _ in answers] == [corr for corr, _ in sent]
        err, _, records = raw.fetch_result(answers[0][1])
        assert err == NONE
        assert [r.value for b in raw.parse_batches(records) for r in b["records"]] == [value]
        assert elapsed < 10, (
            f"the parked Fetch took {elapsed:.1f}s to answer after the append (max wait 15 s)"
        )
    health()


def test_pipelined_burst_in_order(fuzz_broker, fuzz_topic, health, raw):
    with raw.RawClient.to(fuzz_broker) as c:
        reqs = []
        for i in range(200):
            req = [
                raw.api_versions(0),
                raw.metadata([fuzz_topic]),
                raw.fetch(fuzz_topic, 0, 0, max_wait_ms=0),
            ][i % 3]
            reqs.append((c.send(req), type(req)))
        got = [c.recv(t)[0] for _, t in reqs]
        assert got == [corr for corr, _ in reqs]
    health()
