"""The hand-encoded follower FetchRequest v12 matches the frame kio encodes for the same request, byte for byte."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.fetch.v12 import request as fetch_v12

from broker_runtime.protocol.client import encode_request
from broker_runtime.protocol.fetch_request import follower_fetch

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
partition = st.tuples(st.integers(0, 2**31 - 1), int32, int64, int32, int64, int32)
topics = st.lists(st.tuples(st.text(min_size=1, max_size=30), st.lists(partition, max_size=4)), max_size=4)


@given(replica_id=st.integers(0, 2**31 - 1), max_wait_ms=st.integers(0, 2**31 - 1), min_bytes=int32,
       max_bytes=int32, topics=topics, correlation_id=st.integers(0, 2**31 - 1))  # fmt: skip
def test_the_hand_encoding_is_kios(
    replica_id, max_wait_ms, min_bytes, max_bytes, topics, correlation_id
) -> None:
    kio_request = fetch_v12.FetchRequest(
        replica_id=replica_id, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        max_bytes=max_bytes,
        topics=tuple(
            fetch_v12.FetchTopic(topic=name, partitions=tuple(
                fetch_v12.FetchPartition(partition=p[0], current_leader_epoch=p[1], fetch_offset=p[2],
                                         last_fetched_epoch=p[3], log_start_offset=p[4], partition_max_bytes=p[5])
                for p in partitions
            ))
            for name, partitions in topics
        ),
        forgotten_topics_data=(),
    )  # fmt: skip
    ours = follower_fetch(replica_id, max_wait_ms, min_bytes, max_bytes, topics)
    assert encode_request(ours, correlation_id, "replica-fetcher-1-0-0") == encode_request(
        kio_request, correlation_id, "replica-fetcher-1-0-0"
    )
