"""Kafka's variable-length integers, the one codec for the whole broker.

Two encodings share the 7-bits-per-byte, low-group-first layout: unsigned varints (compact lengths and
tagged fields of flexible message versions, at most 5 bytes) and zigzag varints (the fields of a v2 record,
where Kafka's varlong timestamps take up to 10 bytes). Readers take a buffer and a position and return
(value, next position); they raise `VarintError`, which callers turn into their own protocol error.
"""

from __future__ import annotations

_UVARINT_MAX_SHIFT = 28  # 5 bytes: an unsigned 32-bit value
_VARINT_MAX_SHIFT = 63  # 10 bytes: a zigzag 64-bit value
_MASK64 = 2**64 - 1


class VarintError(ValueError):
    """A varint runs past the end of its buffer or is longer than its type allows."""


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's `readUnsignedVarint`)."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise VarintError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > _UVARINT_MAX_SHIFT:
            raise VarintError("varint longer than 5 bytes")


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint of at most 10 bytes; the one-byte case (small lengths and deltas) without a loop."""
    if pos >= len(buf):
        raise VarintError("truncated varint")
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, shift = byte & 0x7F, 7
    while True:
        pos += 1
        if pos >= len(buf):
            raise VarintError("truncated varint")
        byte = buf[pos]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            raw &= _MASK64  # as Java's readVarlong: bits of a 10th byte past the 64th are dropped
            return (raw >> 1) ^ -(raw & 1), pos + 1
        shift += 7
        if shift > _VARINT_MAX_SHIFT:
            raise VarintError("varint longer than 10 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, (value << 1) ^ (value >> 63))
