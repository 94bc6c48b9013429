"""ProduceResponse v3-v9 encoded by hand: it is the most frequent response, and building it through generic
kio dataclasses costs more than the append it acknowledges. `tests/unit/protocol` checks these bytes against
kio's encoder for every version and shape.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from broker_runtime.protocol.framing import EncodedBody

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PARTITION = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_I64 = struct.Struct(">q")

# (index, error_code, base_offset, log_append_time, log_start_offset, error_message)
PartitionResult = tuple[int, int, int, int, int, str | None]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_produce_response(
    version: int, topics: Sequence[tuple[str, Sequence[PartitionResult]]]
) -> EncodedBody:
    flexible = version >= 9
    out = bytearray()
    out += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, partitions in topics:
        raw_name = name.encode()
        out += _uvarint(len(raw_name) + 1) if flexible else _I16.pack(len(raw_name))
        out += raw_name
        out += _uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for index, error_code, base_offset, append_time, log_start_offset, message in partitions:
            out += _PARTITION.pack(index, error_code, base_offset, append_time)
            if version >= 5:
                out += _I64.pack(log_start_offset)
            if version >= 8:
                raw = None if message is None else message.encode()
                if flexible:
                    out += b"\x01"  # record_errors: empty compact array
                    out += b"\x00" if raw is None else _uvarint(len(raw) + 1) + raw
                    out += b"\x00"  # tagged fields
                else:
                    out += _I32.pack(0)
                    out += _I16.pack(-1) if raw is None else _I16.pack(len(raw)) + raw
        if flexible:
            out += b"\x00"
    out += _I32.pack(0)  # throttle time
    if flexible:
        out += b"\x00"
    return EncodedBody(bytes(out), flexible)
