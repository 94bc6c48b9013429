"""The schema walk that bounds lengths and refuses misplaced nulls before kio decodes a request body.

Golden frames from real attacks, then properties over every served API version: a valid body walks to exactly
where kio's reader stops, and a body with lying length fields is either refused by the walk or read by kio to
exactly where the walk stopped, with no null in a field the schema does not allow to be null. (Were the walk to
let a huge length through, kio would abort this test process: that is the bug it guards against.)
"""

from __future__ import annotations

import dataclasses
import functools
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader
from request_bytes import request_body

from broker_runtime.handlers.table import VERSIONS
from broker_runtime.protocol import inter_broker, request_check
from broker_runtime.protocol.framing import FrameError, decode_body, parse_header, request_class
from broker_runtime.protocol.request_check import MalformedRequest, check_request

# Every advertised version that kio has a schema for (Produce v0-2 are advertised but refused: no schema), and
# the controller's requests.
SERVED = sorted(
    {
        (key, v)
        for key, (lo, hi) in VERSIONS.items()
        for v in range(lo, hi + 1)
        if key in api_key_map and v in schema_name_map[api_key_map[key]]
    }
    | set(inter_broker.SCHEMAS)
)
PROPERTY = settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def _decode(frame_hex: str):
    frame = memoryview(bytes.fromhex(frame_hex)[4:])
    header, pos = parse_header(frame)
    return decode_body(header, frame, pos)


# --------------------------------------------------------------------------------------------------------------
# golden frames


@pytest.mark.parametrize(
    ("frame_hex", "field"),
    [
        # Metadata v9, correlation id 1, client id "", no header tags, topics: compact length 0xffffffff
        ("00000010" "0003" "0009" "00000001" "0000" "00" "ffffffff0f", "MetadataRequest.topics"),
        # CreateTopics v5: topics of 2**32 - 2 elements
        ("00000010" "0013" "0005" "00000001" "0000" "00" "ffffffff0f", "CreateTopicsRequest.topics"),
        # DescribeConfigs v4: resources of 2**32 - 2 elements
        ("00000010" "0020" "0004" "00000001" "0000" "00" "ffffffff0f", "DescribeConfigsRequest.resources"),
        # Produce v9: null transactional id, acks 1, timeout 1000, topic_data of 2**32 - 2 elements
        ("00000016" "0000" "0009" "00000001" "0000" "00" "00" "0001" "000003e8" "ffffffff0f",
         "ProduceRequest.topic_data"),
        # Metadata v1 (not flexible): topics of 2**31 - 1 elements
        ("0000000e" "0003" "0001" "00000001" "0000" "7fffffff", "MetadataRequest.topics"),
    ],
)  # fmt: skip
def test_huge_array_lengths_are_refused_before_kio_reads_them(frame_hex: str, field: str) -> None:
    with pytest.raises(FrameError, match=rf"{field}: array of \d+ elements but only 0 bytes left"):
        _decode(frame_hex)


@pytest.mark.parametrize(
    ("frame_hex", "field"),
    [
        # Produce v9: topic_data null (compact length 0)
        ("00000012" "0000" "0009" "00000001" "0000" "00" "00" "0001" "000003e8" "00" "00",
         "ProduceRequest.topic_data"),
        # Produce v3: topic_data null (-1)
        ("00000014" "0000" "0003" "00000001" "0000" "ffff" "0001" "000003e8" "ffffffff",
         "ProduceRequest.topic_data"),
        # Fetch v4: replica -1, max wait 0, min bytes 0, max bytes 1, isolation 0, topics null
        ("0000001d" "0001" "0004" "00000001" "0000" "ffffffff" "00000000" "00000000" "00000001" "00" "ffffffff",
         "FetchRequest.topics"),
        # Produce v9 with one topic whose name is null
        ("00000014" "0000" "0009" "00000001" "0000" "00" "00" "0001" "000003e8" "02" "00" "01" "00" "00",
         "TopicProduceData.name"),
    ],
)  # fmt: skip
def test_null_where_the_schema_forbids_it_is_refused(frame_hex: str, field: str) -> None:
    with pytest.raises(FrameError, match=rf"{field}: null where the field is not nullable"):
        _decode(frame_hex)


def test_null_where_the_schema_allows_it_is_read() -> None:
    # Metadata v9: topics null (all topics), allow auto creation, no authorized operations, no tags
    request = _decode("00000011" "0003" "0009" "00000001" "0000" "00" "00" "01" "00" "00" "00")  # fmt: skip
    assert request.topics is None


def test_a_tagged_field_must_fill_its_declared_size() -> None:
    # Fetch v12 body ending with tag 0 (cluster_id) of size 4 holding a 1-byte string: kio would read the
    # string and carry on inside the rest of the tagged field.
    body = bytes.fromhex(
        "ffffffff" "00000000" "00000000" "00000001" "00" "00000000" "ffffffff" "01" "01" "01"  # no topics
        "01" "00" "04" "01" "000000"
    )  # fmt: skip
    with pytest.raises(MalformedRequest, match="FetchRequest tag 0: value shorter than its size 4"):
        check_request(load_request_schema(1, 12), body, 0)


def test_every_kio_request_schema_compiles() -> None:
    for key, name in api_key_map.items():
        for version in schema_name_map[name]:
            try:
                check_request(load_request_schema(key, version), b"", 0)
            except MalformedRequest:
                pass  # an empty body is too short for most; what matters is that the schema compiled


# --------------------------------------------------------------------------------------------------------------
# properties over every served version


def _nulls_where_forbidden(value, path: str = "") -> list[str]:
    """Paths of None values in fields whose type does not allow None."""
    found = []
    if dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            inner = getattr(value, field.name)
            where = f"{path}.{field.name}"
            optional = get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)
            if inner is None and not optional and field.metadata.get("kafka_type") != "uuid":
                found.append(where)
            found += _nulls_where_forbidden(inner, where)
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            found += _nulls_where_forbidden(item, f"{path}[{i}]")
    return found


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@PROPERTY
@given(data=st.data())
def test_a_valid_body_walks_to_where_kio_stops(api_key: int, version: int, data) -> None:
    cls = request_class(api_key, version)
    body, _ = data.draw(request_body(cls))
    end = check_request(cls, body, 0)
    request, size = entity_reader(cls)(body, 0)
    assert end == size == len(body)
    assert _nulls_where_forbidden(request) == []


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@PROPERTY
@given(data=st.data())
def test_lying_lengths_are_refused_or_read_exactly_as_walked(api_key: int, version: int, data) -> None:
    cls = request_class(api_key, version)
    body, lies = data.draw(request_body(cls, mutate=0.3))
    try:
        end = check_request(cls, body, 0)
    except MalformedRequest:
        return
    try:
        request, size = entity_reader(cls)(body, 0)
    except Exception:  # kio's own refusals (bad UTF-8 after an off-by-one, ...) close the connection too
        return
    assert size == end, f"kio read {size} bytes where the walk stopped at {end} (lies: {lies})"
    assert _nulls_where_forbidden(request) == [], lies


# Requests nested deeper than the walk inlines (no served schema is today): the generated walk calls the walk of
# the nested entity instead, and stops where the inlined one does, or refuses the same bodies.
DEEP = [(0, 9), (1, 12), (19, 7), (11, 9), (4, 7)]  # Produce, Fetch, CreateTopics, JoinGroup, LeaderAndIsr


@functools.cache
def _shallow_walk(cls: type):
    saved, request_check._MAX_INLINE_DEPTH = request_check._MAX_INLINE_DEPTH, 1
    try:
        return request_check._compile(cls)
    finally:
        request_check._MAX_INLINE_DEPTH = saved


@pytest.mark.parametrize(("api_key", "version"), DEEP)
@PROPERTY
@given(data=st.data())
def test_entities_past_the_inline_depth_are_walked_by_calls(api_key: int, version: int, data) -> None:
    cls = request_class(api_key, version)
    body, _ = data.draw(request_body(cls, mutate=0.3))
    outcomes = []
    for walk in (_shallow_walk(cls), request_check._entity(cls)[0]):
        try:
            outcomes.append(walk(body, 0, len(body)))
        except MalformedRequest as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
