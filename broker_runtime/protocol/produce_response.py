"""ProduceResponse v3-v11 encoded by hand: it is the most frequent response, and building it through generic
kio dataclasses costs more than the append it acknowledges. `tests/unit/protocol` checks these bytes against
kio's encoder for every version and shape.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

from broker_runtime.protocol.framing import EncodedBody
from broker_runtime.protocol.varint import write_uvarint

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PARTITION = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_I64 = struct.Struct(">q")

# (index, error_code, base_offset, log_append_time, log_start_offset, record_errors, error_message);
# record_errors (KIP-467) are (batch index, message) of the records that made the batch fail.
RecordError = tuple[int, str | None]
PartitionResult = tuple[int, int, int, int, int, Sequence[RecordError], str | None]


def encode_produce_response(
    version: int, topics: Sequence[tuple[str, Sequence[PartitionResult]]]
) -> EncodedBody:
    flexible = version >= 9
    out = bytearray()
    _length(out, len(topics), flexible)
    for name, partitions in topics:
        out += _name(name, flexible)
        _length(out, len(partitions), flexible)
        for index, error_code, base_offset, append_time, log_start_offset, errors, message in partitions:
            if flexible and not errors and message is None:  # the usual answer, in one pack
                out += _PARTITION_OK_FLEXIBLE.pack(
                    index, error_code, base_offset, append_time, log_start_offset, b"\x01\x00\x00"
                )
                continue
            out += _PARTITION.pack(index, error_code, base_offset, append_time)
            if version >= 5:
                out += _I64.pack(log_start_offset)
            if version >= 8:
                _length(out, len(errors), flexible)
                for batch_index, error in errors:
                    out += _I32.pack(batch_index)
                    _string(out, error, flexible)
                    if flexible:
                        out += b"\x00"  # tagged fields
                _string(out, message, flexible)
                if flexible:
                    out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _I32.pack(0)  # throttle time
    if flexible:
        out += b"\x00"
    return EncodedBody((out,), flexible)


# a partition of a flexible version with no record errors and no message: ..., log start offset, record errors
# (compact, empty), error message (compact, null), tagged fields (none)
_PARTITION_OK_FLEXIBLE = struct.Struct(">ihqqq3s")


@lru_cache(maxsize=1024)
def _name(name: str, flexible: bool) -> bytes:
    """A topic name with its length, as written in every answer to a topic's producers."""
    out = bytearray()
    _string(out, name, flexible)
    return bytes(out)


def _length(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else _I16.pack(-1)
        return
    raw = value.encode()
    if flexible:
        write_uvarint(out, len(raw) + 1)
    else:
        out += _I16.pack(len(raw))
    out += raw
