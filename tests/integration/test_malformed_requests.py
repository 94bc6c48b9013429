"""Malformed request bodies as raw bytes against a live broker: the sending connection is closed with one
WARNING line that names the field, no traceback, and the broker keeps serving everyone else.

- Length prefixes that claim more than the frame holds (a compact array of 2**32 - 2 elements in a 20-byte
  Metadata v9 frame used to make the decoder allocate 32 GiB and abort the process).
- Null where the message spec does not allow it (it used to reach the handlers and end in a TypeError
  traceback), for every top-level array and string of every served API, and nested.
"""

from __future__ import annotations

import re
import socket
import struct
import time

import pytest
from kio.index import UnknownEntity
from request_bytes import minimal_body, nulls_refused

from broker_runtime.handlers.table import VERSIONS
from broker_runtime.protocol.framing import request_class

LOG_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def broker(broker_logs_dir, helpers):
    broker = helpers.new_broker(broker_logs_dir, "malformed", {"auto.create.topics.enable": "false"})
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(autouse=True)
def _show_log(request, broker, helpers):
    helpers.remember_broker(request, broker)
    if not broker.alive:
        pytest.fail(f"the broker died before this test\n{broker.log_tail()}")


def request_frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    """Size, request header (v2 with its empty tagged fields for flexible versions, else v1), body."""
    flexible = request_class(api_key, version).__flexible__
    client_id = b"malformed"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    header += b"\x00" if flexible else b""
    return struct.pack(">i", len(header) + len(body)) + header + body


def closed_without_answer(broker, payload: bytes, timeout: float = 10.0) -> bool:
    """Send `payload` on a fresh connection; True when the broker closes it without sending anything."""
    with socket.create_connection((broker.host, broker.port), timeout=timeout) as sock:
        sock.sendall(payload)
        sock.settimeout(timeout)
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


def broker_log_after(broker, mark: int, pattern: str) -> str:
    """The log written since `mark` (a length of the log text), once `pattern` appears in it."""
    deadline = time.monotonic() + LOG_TIMEOUT_S
    while True:
        text = broker.log_text()[mark:]
        if re.search(pattern, text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no log line matching {pattern!r} within {LOG_TIMEOUT_S}s; log since:\n{text}"
            )
        time.sleep(0.05)


def assert_refused(broker, raw, payload: bytes, pattern: str) -> None:
    mark = len(broker.log_text())
    assert closed_without_answer(broker, payload), "the broker answered a malformed request"
    assert broker.alive, f"the broker died\n{broker.log_tail()}"
    if not broker.is_tansu:
        text = broker_log_after(broker, mark, pattern)
        lines = [line for line in text.splitlines() if re.search(pattern, line)]
        assert len(lines) == 1 and " WARNING " in lines[0], lines
        assert "Traceback" not in text and " ERROR " not in text, text
    with raw.RawClient.to(broker) as client:
        assert client.call(raw.metadata([], version=9)).brokers, (
            "the broker does not serve a fresh connection"
        )


@pytest.mark.parametrize(
    ("api_key", "version", "body_hex", "field"),
    [
        (3, 9, "ffffffff0f", "MetadataRequest.topics"),  # the 20-byte frame
        (19, 5, "ffffffff0f", "CreateTopicsRequest.topics"),
        (32, 4, "ffffffff0f", "DescribeConfigsRequest.resources"),
        (0, 9, "00" "0001" "000003e8" "ffffffff0f", "ProduceRequest.topic_data"),
        (0, 9, "00" "0001" "000003e8" "02" "0274" "ffffffff0f", "TopicProduceData.partition_data"),
        (0, 9, "00" "0001" "000003e8" "02" "0274" "02" "00000000" "ffffff7f", "PartitionProduceData.records"),
        (1, 12, "ffffffff" "000001f4" "00000001" "00a00000" "00" "00000000" "ffffffff" "ffffffff0f",
         "FetchRequest.topics"),
        (3, 1, "7fffffff", "MetadataRequest.topics"),  # not flexible: 2**31 - 1 elements
        (3, 9, "02" "c901", "MetadataRequestTopic.name"),  # a 200-byte string, 0 bytes sent
    ],
)  # fmt: skip
def test_lengths_beyond_the_frame_close_only_that_connection(broker, raw, api_key, version, body_hex, field):
    payload = request_frame(api_key, version, bytes.fromhex(body_hex))
    assert_refused(broker, raw, payload, rf"{re.escape(field)}: .* but only \d+ bytes left")


def _schema(key: int, version: int):
    """kio's schema or the controller's request; None for versions refused before decoding (Produce v0)."""
    try:
        return request_class(key, version)
    except UnknownEntity:
        return None


NULL_CASES = [
    (key, version, field)
    for key, (lo, hi) in sorted(VERSIONS.items())
    for version in sorted({lo, hi})
    if _schema(key, version) is not None
    for field in nulls_refused(_schema(key, version))
]


@pytest.mark.parametrize(("api_key", "version", "field"), NULL_CASES)
def test_null_where_the_spec_forbids_it_closes_only_that_connection(broker, raw, api_key, version, field):
    cls = request_class(api_key, version)
    payload = request_frame(api_key, version, minimal_body(cls, null=field))
    assert_refused(broker, raw, payload, rf"{cls.__name__}\.{field}: null where the field is not nullable")


def test_a_nested_null_array_closes_only_that_connection(broker, raw):
    # Produce v9: one topic "t" whose partition_data is null
    payload = request_frame(0, 9, bytes.fromhex("000001000003e8020274000000"))
    assert_refused(
        broker, raw, payload, r"TopicProduceData\.partition_data: null where the field is not nullable"
    )
