"""The hand-encoded FetchResponse (followers' fetches) matches kio's encoding byte for byte, v12-v15."""

from __future__ import annotations

import datetime
import io
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from broker_runtime.protocol.fetch_response import FIRST_VERSION, LAST_VERSION, encode_fetch_response
from broker_runtime.protocol.framing import SEPARATE_CHUNK_BYTES, encode_response
from broker_runtime.protocol.messages import make, response_module

partition = st.fixed_dictionaries({
    "partition_index": st.integers(0, 2**31 - 1),
    "error_code": st.sampled_from([0, 1, 3, 6, 74]),
    "high_watermark": st.integers(-1, 2**62),
    "last_stable_offset": st.integers(-1, 2**62),
    "log_start_offset": st.integers(-1, 2**62),
    "aborted": st.none() | st.lists(st.tuples(st.integers(-1, 2**62), st.integers(0, 2**62)), max_size=3),
    "preferred_read_replica": st.integers(-1, 5),
    "records": st.none() | st.binary(max_size=40) | st.binary(min_size=600, max_size=2000),
    "diverging": st.none() | st.tuples(st.integers(-1, 2**31 - 1), st.integers(-1, 2**62)),
})  # fmt: skip
topics = st.lists(st.tuples(st.text(min_size=1, max_size=20), st.uuids(), st.lists(partition, max_size=3)),
                  max_size=3)  # fmt: skip


def _response(version: int, data, throttle_ms: int, session_id: int, **extra):
    types = response_module(1, version)
    return make(
        types.FetchResponse, throttle_time=datetime.timedelta(milliseconds=throttle_ms), error_code=ErrorCode.none,
        session_id=session_id,
        responses=tuple(
            make(types.FetchableTopicResponse, topic=name, topic_id=topic_id, partitions=tuple(
                make(
                    types.PartitionData, partition_index=p["partition_index"], error_code=ErrorCode(p["error_code"]),
                    high_watermark=p["high_watermark"], last_stable_offset=p["last_stable_offset"],
                    log_start_offset=p["log_start_offset"],
                    aborted_transactions=None if p["aborted"] is None else tuple(
                        make(types.AbortedTransaction, producer_id=pid, first_offset=first)
                        for pid, first in p["aborted"]
                    ),
                    preferred_read_replica=p["preferred_read_replica"], records=p["records"],
                    **({} if p["diverging"] is None else {"diverging_epoch": types.EpochEndOffset(
                        epoch=p["diverging"][0], end_offset=p["diverging"][1])}),
                    **extra,
                )
                for p in parts
            ))
            for name, topic_id, parts in data
        ),
    )  # fmt: skip


def _kio_bytes(response) -> bytes:
    out = io.BytesIO()
    entity_writer(type(response))(out, response)
    return out.getvalue()


@pytest.mark.parametrize("version", range(FIRST_VERSION, LAST_VERSION + 1))
@settings(max_examples=60, deadline=None)
@given(data=topics, throttle_ms=st.integers(0, 10_000), session_id=st.integers(0, 2**31 - 1))
def test_the_hand_encoding_is_kios(version: int, data, throttle_ms: int, session_id: int) -> None:
    response = _response(version, data, throttle_ms, session_id)
    encoded = encode_fetch_response(version, response)
    assert encoded is not None and encoded.flexible
    assert encoded.body == _kio_bytes(response)


def test_a_response_with_fields_it_does_not_write_is_left_to_kio() -> None:
    types = response_module(1, 12)
    one = [("t", uuid.uuid4(), [{"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
                                 "log_start_offset": 0, "aborted": None, "preferred_read_replica": -1,
                                 "records": b"", "diverging": None}])]  # fmt: skip
    leader = _response(12, one, 0, 0, current_leader=types.LeaderIdAndEpoch(leader_id=2, leader_epoch=7))
    assert encode_fetch_response(12, leader) is None
    assert encode_fetch_response(11, _response(11, one, 0, 0)) is None
    assert encode_fetch_response(16, _response(16, one, 0, 0)) is None


@pytest.mark.parametrize("version", [12, 13])
def test_large_records_leave_uncopied_in_chunks_that_make_kios_frame(version: int) -> None:
    big, small = b"r" * (SEPARATE_CHUNK_BYTES + 1), b"s" * 700
    p = {"partition_index": 0, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5, "log_start_offset": 0,
         "aborted": None, "preferred_read_replica": -1, "diverging": None}  # fmt: skip
    response = _response(version, [("t", uuid.uuid4(), [{**p, "records": big}, {**p, "partition_index": 1,
                                                                                  "records": small}])], 0, 0)  # fmt: skip
    chunks = encode_response(7, encode_fetch_response(version, response))
    assert isinstance(chunks, tuple)
    assert any(chunk is big for chunk in chunks), "the large records were copied"
    body = _kio_bytes(response)
    assert b"".join(chunks) == struct.pack(">ii", 4 + 1 + len(body), 7) + b"\x00" + body
