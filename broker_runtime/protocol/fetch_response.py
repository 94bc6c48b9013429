"""FetchResponse v12-v15 encoded by hand for followers' fetches: at RF 3 every append is answered to two
followers, and kio's generic writer copies each partition's records into a growing buffer field by field.
Here the fixed fields of a partition go in one pack, and the records stay parts of their own (framing.EncodedBody).
Anything this encoder does not write (a current leader or snapshot id tag) falls back to kio (None).
`tests/unit/protocol` checks these bytes against kio's encoder.
"""

from __future__ import annotations

import struct
from typing import Any

from broker_runtime.protocol.framing import EncodedBody
from broker_runtime.protocol.varint import write_uvarint

FIRST_VERSION, LAST_VERSION = 12, 15  # flexible, no top-level tags (v16 adds node endpoints)
TOPIC_IDS_SINCE = 13

_HEAD = struct.Struct(">ihi")  # throttle time (ms), error code, session id
_PARTITION = struct.Struct(
    ">ihqqq"
)  # index, error code, high watermark, last stable offset, log start offset
_ABORTED = struct.Struct(">qqB")  # producer id, first offset, tagged fields (none)
_I32 = struct.Struct(">i")
_DIVERGING = struct.Struct(">BBBiqB")  # 1 tag, tag 0, size 13, epoch, end offset, its tagged fields (none)


def encode_fetch_response(version: int, response: Any) -> EncodedBody | None:
    """`response` (kio's FetchResponse of `version`) in wire form, or None when kio must write it."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    parts: list[bytes | bytearray] = []
    out = bytearray(_HEAD.pack(round(response.throttle_time.total_seconds() * 1000), response.error_code,
                               response.session_id))  # fmt: skip
    write_uvarint(out, len(response.responses) + 1)
    for topic in response.responses:
        if version >= TOPIC_IDS_SINCE:
            out += topic.topic_id.bytes
        else:
            name = topic.topic.encode()
            write_uvarint(out, len(name) + 1)
            out += name
        write_uvarint(out, len(topic.partitions) + 1)
        for p in topic.partitions:
            if p.current_leader.leader_id != -1 or p.current_leader.leader_epoch != -1:
                return None
            if p.snapshot_id.end_offset != -1 or p.snapshot_id.epoch != -1:
                return None
            out += _PARTITION.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                                   p.log_start_offset)  # fmt: skip
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\x00"
            else:
                write_uvarint(out, len(aborted) + 1)
                for txn in aborted:
                    out += _ABORTED.pack(txn.producer_id, txn.first_offset, 0)
            out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += b"\x00"
            else:
                write_uvarint(out, len(records) + 1)
                if len(records) > 512:  # a part of its own rather than copied into a growing buffer
                    parts.append(out)
                    parts.append(records)
                    out = bytearray()
                else:
                    out += records
            diverging = p.diverging_epoch
            if diverging.epoch != -1 or diverging.end_offset != -1:
                out += _DIVERGING.pack(1, 0, 12 + 1, diverging.epoch, diverging.end_offset, 0)
            else:
                out += b"\x00"
        out += b"\x00"  # topic tagged fields
    out += b"\x00"  # response tagged fields
    parts.append(out)
    return EncodedBody(tuple(parts), True)
