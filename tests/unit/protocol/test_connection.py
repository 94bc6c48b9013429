"""The sans-I/O connection core: frames out of arbitrary chunks, request bytes reserved from the memory pool
before they are gathered, and responses in request order whatever order the handlers finish in."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.response import MetadataResponse, MetadataResponseBroker

from broker_runtime.protocol.connection import ServerConnection
from broker_runtime.protocol.framing import FrameError
from broker_runtime.server.limits import MemoryPool

OK = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=())


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def frames_of(conn: ServerConnection) -> list[bytes]:
    out = []
    while (frame := conn.next_frame()) is not None:
        out.append(bytes(frame.payload))
    return out


# --------------------------------------------------------------------------------------------------------------
# input


@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    cuts=st.lists(st.integers(0, 3000), max_size=12),
)
def test_frames_come_out_whole_however_the_stream_is_cut(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(framed(p) for p in payloads)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    conn = ServerConnection(1024)
    got = []
    for start, end in itertools.pairwise(bounds):
        conn.receive_data(stream[start:end])
        got += frames_of(conn)
    assert got == payloads
    assert conn.buffered == 0


def test_a_frame_inside_one_chunk_is_a_read_only_view_of_it() -> None:
    chunk = framed(b"abc") + framed(b"defg")
    conn = ServerConnection(1024)
    conn.receive_data(chunk)
    first, second = conn.next_frame(), conn.next_frame()
    assert bytes(first.payload) == b"abc" and bytes(second.payload) == b"defg"
    assert first.payload.obj is chunk and first.payload.readonly


def test_a_frame_gathered_from_chunks_is_read_only() -> None:
    conn = ServerConnection(1024)
    data = framed(b"x" * 100)
    conn.receive_data(data[:50])
    assert conn.next_frame() is None
    conn.receive_data(data[50:])
    frame = conn.next_frame()
    assert bytes(frame.payload) == b"x" * 100 and frame.payload.readonly


@pytest.mark.parametrize("size", [-1, 1025, -(2**31)])
def test_a_size_outside_the_limit_is_refused_before_any_body_arrives(size: int) -> None:
    conn = ServerConnection(1024)
    conn.receive_data(struct.pack(">i", size))
    with pytest.raises(FrameError, match=r"socket\.request\.max\.bytes"):
        conn.next_frame()


def test_frame_bytes_are_reserved_from_the_pool_before_they_are_gathered() -> None:
    pool = MemoryPool(150)
    a, b, c = (ServerConnection(100, pool.try_reserve) for _ in range(3))
    for conn in (a, b, c):
        conn.receive_data(struct.pack(">i", 100) + b"y" * 10)  # the size and the start of a 100-byte frame
        assert conn.next_frame() is None
    # Kafka's non-strict pool: a reservation succeeds while any memory is left, so b overshoots; c must wait.
    assert (a.waiting_for_memory, b.waiting_for_memory, c.waiting_for_memory) == (False, False, True)
    assert pool.available == -50
    a.receive_data(b"y" * 90)
    frame = a.next_frame()
    assert frame is not None and frame.reserved == 100
    assert pool.release(frame.reserved) is True  # the pool has memory again: refused readers may retry
    assert c.next_frame() is None and not c.waiting_for_memory  # reserved now, still needs its bytes
    c.receive_data(b"y" * 90)
    assert bytes(c.next_frame().payload) == b"y" * 100


def test_closing_returns_the_reservation_of_a_frame_half_read() -> None:
    pool = MemoryPool(1000)
    conn = ServerConnection(500, pool.try_reserve)
    conn.receive_data(struct.pack(">i", 400) + b"z" * 100)
    assert conn.next_frame() is None
    assert pool.available == 600
    pool.release(conn.release_all())
    assert pool.available == 1000 and conn.buffered == 0


# --------------------------------------------------------------------------------------------------------------
# output


def test_responses_leave_in_request_order_whatever_order_handlers_finish_in() -> None:
    conn = ServerConnection(1024)
    first, second, third = (conn.open_slot(corr, 18) for corr in (1, 2, 3))
    conn.complete(third, OK)
    assert conn.data_to_send() == []
    conn.complete(first, OK)
    out = conn.data_to_send()
    assert [struct.unpack_from(">i", p, 4)[0] for p in out] == [1]
    conn.complete(second, OK)
    assert [struct.unpack_from(">i", p, 4)[0] for p in conn.data_to_send()] == [2, 3]
    assert conn.in_flight == 0


def test_a_request_without_response_frees_its_place_silently() -> None:
    conn = ServerConnection(1024)
    produce_acks0, metadata = conn.open_slot(1, 0), conn.open_slot(2, 18)
    conn.complete(metadata, OK)
    conn.complete(produce_acks0, None)
    assert [struct.unpack_from(">i", p, 4)[0] for p in conn.data_to_send()] == [2]


def test_a_response_that_cannot_be_encoded_keeps_its_slot_and_everything_behind_it() -> None:
    conn = ServerConnection(1024)
    broken, later = conn.open_slot(1, 3), conn.open_slot(2, 18)
    conn.complete(later, OK)
    unencodable = MetadataResponse(
        brokers=(MetadataResponseBroker(node_id=0, host="h" * 40_000, port=9092, rack=None),),  # > int16 length
        controller_id=0, topics=(),
    )  # fmt: skip
    with pytest.raises(Exception, match="too long"):
        conn.complete(broken, unencodable)
    assert conn.data_to_send() == [] and conn.in_flight == 2  # the caller must close the connection
