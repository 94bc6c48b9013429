"""FetchRequest v12 encoded by hand for followers' fetches: a follower sends one after every fetch response, and
kio's generic writer spends ~25 us on it, most of it on the critical path of an acks=all produce (the leader's
high watermark waits for that request). `tests/unit/protocol/test_fetch_request.py` checks these bytes against
kio's encoder.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from broker_runtime.protocol.client import EncodedRequest
from broker_runtime.protocol.varint import write_uvarint

FETCH_KEY, VERSION = 1, 12

# Replica id, max wait, min bytes, max bytes, isolation level, session id and epoch.
_HEAD = struct.Struct(">iiiibii")
# Index, current leader epoch, fetch offset, last fetched epoch, log start, max bytes, tagged fields (none).
_PARTITION = struct.Struct(">iiqiqiB")

# (partition, current leader epoch, fetch offset, last fetched epoch, log start offset, partition max bytes)
FetchPartition = tuple[int, int, int, int, int, int]


def follower_fetch(
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    topics: Sequence[tuple[str, Sequence[FetchPartition]]],
) -> EncodedRequest:
    """A follower's Fetch v12: read_uncommitted, no fetch session (id 0, epoch -1), no forgotten topics, no
    rack, no cluster id: what the fetcher's kio request held."""
    out = bytearray(_HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, 0, 0, -1))
    write_uvarint(out, len(topics) + 1)
    pack = _PARTITION.pack
    for name, partitions in topics:
        raw = name.encode()
        write_uvarint(out, len(raw) + 1)
        out += raw
        write_uvarint(out, len(partitions) + 1)
        for p in partitions:
            out += pack(*p, 0)
        out.append(0)  # the topic's tagged fields
    out += b"\x01\x01\x00"  # no forgotten topics, empty rack id, no tagged fields
    return EncodedRequest(FETCH_KEY, VERSION, True, out)
