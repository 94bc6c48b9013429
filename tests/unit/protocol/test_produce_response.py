"""The hand-encoded ProduceResponse matches kio's encoding byte for byte, for every advertised version."""

from __future__ import annotations

import datetime
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from broker_runtime.protocol.apis import CORE_API_VERSIONS, ApiKey
from broker_runtime.protocol.messages import make, response_module
from broker_runtime.protocol.produce_response import encode_produce_response

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

partition = st.tuples(
    st.integers(0, 2**31 - 1),
    st.sampled_from([0, 3, 10, 45, 87]),
    st.integers(-1, 2**62),
    st.integers(-1, 2**40),
    st.integers(-1, 2**62),
    st.lists(st.tuples(st.integers(0, 2**31 - 1), st.none() | st.text(max_size=30)), max_size=3),
    st.none() | st.text(max_size=30),
)
topics = st.lists(st.tuples(st.text(min_size=1, max_size=20), st.lists(partition, max_size=3)), max_size=3)


def _kio_bytes(version: int, data) -> bytes:
    types = response_module(0, version)
    response = make(
        types.ProduceResponse,
        throttle_time=datetime.timedelta(0),
        responses=tuple(
            make(types.TopicProduceResponse, name=name, partition_responses=tuple(
                make(
                    types.PartitionProduceResponse, index=i, error_code=ErrorCode(e), base_offset=b,
                    log_append_time=None if t < 0 else _EPOCH + datetime.timedelta(milliseconds=t),
                    log_start_offset=s,
                    record_errors=tuple(
                        make(types.BatchIndexAndErrorMessage, batch_index=bi, batch_index_error_message=bm)
                        for bi, bm in (r if version >= 8 else ())
                    ),
                    error_message=m,
                )
                for i, e, b, t, s, r, m in parts
            ))
            for name, parts in data
        ),
    )  # fmt: skip
    out = io.BytesIO()
    entity_writer(type(response))(out, response)
    return out.getvalue()


@pytest.mark.parametrize("version", range(3, CORE_API_VERSIONS[ApiKey.PRODUCE][1] + 1))
@settings(max_examples=40, deadline=None)
@given(data=topics)
def test_matches_kio(version: int, data) -> None:
    encoded = encode_produce_response(version, data)
    assert encoded.flexible == (version >= 9)
    assert encoded.body == _kio_bytes(version, data)
