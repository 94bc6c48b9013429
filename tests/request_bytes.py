"""Request bodies as raw bytes, generated from kio's schemas (hypothesis), with length fields and nulls gone bad.

``request_body(cls, mutate=...)`` draws an encoding of a kio request entity field by field, so every length
prefix (compact or legacy arrays, strings, bytes, records, tagged-field sizes) and every null marker is a place
where it can lie. With ``mutate`` a drawn fraction of them become huge (2**32-1 as a varint, 2**31-1 as an
int32), negative, off by one either way, or null where the schema does not allow it; everything after keeps
being generated as if the lie were true, so the decoder meets a plausible rest of the body.

Used by the unit tests of ``broker_runtime/protocol/request_check.py`` and by the live-broker fuzz run.
"""

from __future__ import annotations

import dataclasses
import struct
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

from hypothesis import strategies as st
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

FIXED_SIZES = {
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip

#: What a mutated length field says instead of the truth.
LIES = ("huge", "negative", "plus_one", "minus_one", "null")


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _nullable(field: dataclasses.Field) -> bool:
    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)


class _Encoder:
    def __init__(self, draw, mutate: float) -> None:
        self.draw = draw
        self.mutate = mutate  # probability that one length field lies
        self.lies: list[str] = []

    def lie(self) -> str | None:
        if self.mutate and self.draw(st.floats(0, 1)) < self.mutate:
            lie = self.draw(st.sampled_from(LIES))
            self.lies.append(lie)
            return lie
        return None

    def length(self, actual: int | None, flexible: bool, width: str = ">i") -> bytes:
        """The prefix of an array/string/bytes of `actual` items (None: null)."""
        lie = self.lie()
        bits = 8 * struct.calcsize(width)
        if lie == "huge":
            return uvarint(0xFFFFFFFF) if flexible else struct.pack(width, 2 ** (bits - 1) - 1)
        if lie == "negative" and not flexible:
            return struct.pack(width, self.draw(st.sampled_from([-2, -(2 ** (bits - 1))])))
        if lie == "null" or (lie == "negative" and flexible):
            return b"\x00" if flexible else struct.pack(width, -1)
        if actual is not None and lie in ("plus_one", "minus_one"):
            actual = max(actual + (1 if lie == "plus_one" else -1), 0)
        if actual is None:
            return b"\x00" if flexible else struct.pack(width, -1)
        return uvarint(actual + 1) if flexible else struct.pack(width, actual)

    def tag_size(self, actual: int) -> bytes:
        lie = self.lie()
        if lie == "huge":
            return uvarint(0xFFFFFFFF)
        if lie in ("plus_one", "minus_one"):
            return uvarint(max(actual + (1 if lie == "plus_one" else -1), 0))
        if lie in ("negative", "null"):
            return uvarint(0)
        return uvarint(actual)

    def primitive(self, kafka_type: str, flexible: bool, nullable: bool) -> bytes:
        draw = self.draw
        if kafka_type == "bool":
            return bytes([draw(st.integers(0, 1))])
        if kafka_type in ("timedelta_i64", "datetime_i64"):
            # within what Python's timedelta and datetime hold, which kio converts to
            return struct.pack(">q", draw(st.integers(-(2**40), 2**40)))
        size = FIXED_SIZES.get(kafka_type)
        if size is not None:
            return draw(st.binary(min_size=size, max_size=size))
        if nullable and draw(st.integers(0, 4)) == 0:
            return self.length(None, flexible, ">h" if kafka_type == "string" else ">i")
        if kafka_type == "string":
            value = draw(st.text(st.characters(min_codepoint=32, max_codepoint=0x24F), max_size=12)).encode()
            return self.length(len(value), flexible, ">h") + value
        value = draw(st.binary(max_size=24))
        return self.length(len(value), flexible) + value

    def entity(self, cls: type) -> bytes:
        flexible = cls.__flexible__
        out = bytearray()
        tagged: list[tuple[int, bytes]] = []
        for field in dataclasses.fields(cls):
            tag = get_field_tag(field)
            value = self.field(field, flexible, tagged=tag is not None)
            if tag is None:
                out += value
            elif self.draw(st.booleans()):
                tagged.append((int(tag), value))
        if flexible:
            out += uvarint(len(tagged))
            for tag, value in tagged:
                out += uvarint(tag) + self.tag_size(len(value)) + value
        return bytes(out)

    def field(self, field: dataclasses.Field, flexible: bool, tagged: bool) -> bytes:
        kind = classify_field(field)
        # A null tagged value is never sent (Kafka leaves a tagged field out when it has its default); kio could
        # not read one anyway.
        nullable = _nullable(field) and not tagged
        if isinstance(kind, PrimitiveField):
            return self.primitive(get_schema_field_type(field), flexible, nullable)
        if isinstance(kind, EntityField):
            if nullable:
                if self.draw(st.integers(0, 3)) == 0:
                    return b"\xff"
                return b"\x01" + self.entity(kind.type_)
            return self.entity(kind.type_)
        count = self.draw(st.integers(0, 3))
        if nullable and self.draw(st.integers(0, 4)) == 0:
            return self.length(None, flexible)
        prefix = self.length(count, flexible)
        if isinstance(kind, PrimitiveTupleField):
            kafka_type = get_schema_field_type(field)
            return prefix + b"".join(self.primitive(kafka_type, flexible, False) for _ in range(count))
        assert isinstance(kind, EntityTupleField)
        return prefix + b"".join(self.entity(kind.type_) for _ in range(count))


@st.composite
def request_body(draw, cls: type, mutate: float = 0.0) -> tuple[bytes, list[str]]:
    """(body bytes, the lies told); ``mutate`` is the probability of each length field lying."""
    encoder = _Encoder(draw, mutate)
    body = encoder.entity(cls)
    return body, encoder.lies


def minimal_body(cls: type, null: str | None = None) -> bytes:
    """The shortest body of `cls`: zeros, empty strings and arrays, absent nullable structs, no tagged fields.
    The top-level field named `null` is written as null (compact 0, or -1), whatever the schema allows."""
    flexible = cls.__flexible__
    out = bytearray()
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            continue
        kind = classify_field(field)
        kafka_type = get_schema_field_type(field) if isinstance(kind, PrimitiveField) else None
        if field.name == null:
            out += b"\x00" if flexible else struct.pack(">h" if kafka_type == "string" else ">i", -1)
        elif isinstance(kind, EntityField):
            out += b"\xff" if _nullable(field) else minimal_body(kind.type_)
        elif isinstance(kind, PrimitiveField) and kafka_type in FIXED_SIZES:
            out += bytes(FIXED_SIZES[kafka_type])
        elif kafka_type == "bool":
            out += b"\x00"
        else:  # empty string, bytes or array
            out += b"\x01" if flexible else bytes(2 if kafka_type == "string" else 4)
    if flexible:
        out += b"\x00"
    return bytes(out)


def nulls_refused(cls: type) -> list[str]:
    """Top-level fields of `cls` that have a null form on the wire (arrays, strings, bytes) the schema forbids."""
    return [
        field.name
        for field in dataclasses.fields(cls)
        if get_field_tag(field) is None
        and not _nullable(field)
        and not isinstance(classify_field(field), EntityField)
        and (
            not isinstance(classify_field(field), PrimitiveField)
            or get_schema_field_type(field) in ("string", "bytes", "records")
        )
    ]
