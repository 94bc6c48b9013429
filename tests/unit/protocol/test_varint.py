"""The one varint codec: Kafka's byte layouts, round trips, and errors instead of crashes on bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_runtime.protocol.varint import VarintError, read_uvarint, read_varint, write_uvarint, write_varint


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (1, b"\x02"), (-1, b"\x01"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (300, b"\xd8\x04"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**63), b"\xff" * 9 + b"\x01")],
)  # fmt: skip
def test_zigzag_layout(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_varint(out, value)
    assert bytes(out) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (2**32 - 1, b"\xff\xff\xff\xff\x0f")],
)
def test_unsigned_layout(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_uvarint(out, value)
    assert bytes(out) == encoded
    assert read_uvarint(encoded, 0) == (value, len(encoded))


@given(st.integers(-(2**63), 2**63 - 1), st.binary(max_size=3))
def test_zigzag_round_trip_at_an_offset(value: int, prefix: bytes) -> None:
    out = bytearray(prefix)
    write_varint(out, value)
    assert read_varint(bytes(out) + b"\x00", len(prefix)) == (value, len(out))


@given(st.integers(0, 2**32 - 1))
def test_unsigned_round_trip(value: int) -> None:
    out = bytearray()
    write_uvarint(out, value)
    assert read_uvarint(out, 0) == (value, len(out))


@pytest.mark.parametrize("reader", [read_uvarint, read_varint])
@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff"])
def test_truncated(reader, data: bytes) -> None:
    with pytest.raises(VarintError, match="truncated"):
        reader(data, 0)


def test_too_long() -> None:
    with pytest.raises(VarintError, match="longer than 5"):
        read_uvarint(b"\xff" * 5 + b"\x01", 0)
    with pytest.raises(VarintError, match="longer than 10"):
        read_varint(b"\xff" * 10 + b"\x01", 0)
