"""Sans-I/O framing: golden bytes, split delivery, and the errors that close a connection."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.handlers.api_versions import unsupported_version_response
from broker_runtime.protocol.apis import CORE_API_VERSIONS
from broker_runtime.protocol.framing import (
    SEPARATE_CHUNK_BYTES,
    FrameError,
    decode_body,
    encode_response,
    frame_chunks,
    parse_header,
)

# ApiVersions v0 request from correlation id 7, client "c": no body.
API_VERSIONS_V0 = bytes.fromhex(
    "0012"  # api key 18
    "0000"  # api version 0
    "00000007"  # correlation id
    "0001" "63"  # client id "c"
)  # fmt: skip


def test_header_and_empty_body_parse() -> None:
    header, pos = parse_header(memoryview(API_VERSIONS_V0))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (18, 0, 7, "c")
    body = decode_body(header, memoryview(API_VERSIONS_V0), pos)
    assert type(body).__name__ == "ApiVersionsRequest"


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    data = memoryview(API_VERSIONS_V0 + b"\x00\x01")
    header, pos = parse_header(data)
    assert type(decode_body(header, data, pos)).__name__ == "ApiVersionsRequest"


def test_unsupported_api_versions_answer_is_v0_shaped_with_ranges() -> None:
    frame = encode_response(9, unsupported_version_response(CORE_API_VERSIONS), header_v0=True)
    size, correlation, error, count = struct.unpack_from(">iihi", frame)
    assert (size, correlation, error, count) == (len(frame) - 4, 9, 35, len(CORE_API_VERSIONS))
    first = struct.unpack_from(">hhh", frame, 14)
    assert first == (0, *CORE_API_VERSIONS[0])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_raises_anything_but_frame_error(data: bytes) -> None:
    view = memoryview(data)
    try:
        header, pos = parse_header(view)
        if (header.api_key, header.api_version) in {(18, 0), (3, 1), (0, 3), (1, 4)}:
            decode_body(header, view, pos)
    except FrameError:
        pass


def test_frame_chunks_join_runs_of_small_parts_and_leave_large_ones_alone() -> None:
    large = b"L" * SEPARATE_CHUNK_BYTES
    chunks = frame_chunks([b"a", b"b", large, b"c", large, b"d", b"e"])
    assert chunks == (b"ab", large, b"c", large, b"de")
    assert chunks[1] is large and chunks[3] is large
