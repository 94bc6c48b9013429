"""Lengths and nulls of a request body, checked against its schema before kio decodes it.

kio 0.6's native reader trusts length prefixes: it reserves room for an array's declared element count before
reading a single element, so a 20-byte request whose compact array length is a huge varint makes it allocate
tens of GB and abort the process. It also reads a null array as None where the message spec does not allow
null. Kafka's generated readers refuse both ("Tried to allocate a collection of size N, but there are only R
bytes remaining", "non-nullable field X was serialized as null"), and so does this walk, whatever kio does.

`check_request(cls, buf, pos)` walks the body along the same schema kio reads: the kio entity dataclasses and
their field metadata, classified with the introspection helpers kio's own schema compiler uses. Each entity
compiles once into a list of steps `(buf, pos, end) -> pos`; consecutive fixed-size fields collapse into one
step, and an array of fixed-size elements is skipped in one step. It raises `MalformedRequest` for a truncated
field, a length longer than the bytes left, a negative length other than null, null where the field is not
nullable, a string over 32767 bytes, a varint over 5 bytes, or a tagged field whose value does not fill exactly
its declared size. Where kio and Kafka read differently (a nullable struct's marker), the walk refuses what the
two would read differently, so that whatever passes is read by kio exactly as it was walked.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

from broker_runtime.protocol.varint import VarintError, read_uvarint

MAX_STRING_BYTES = 0x7FFF  # Kafka's readers refuse longer strings, compact or not

Buffer = bytes | bytearray | memoryview
Step = Callable[[Buffer, int, int], int]  # (buffer, position, end of the enclosing value) -> next position

_FIXED_SIZES = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
    "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class MalformedRequest(ValueError):
    """The request body does not follow its schema; Kafka closes the connection that sent it."""


def check_request(cls: type, buf: Buffer, pos: int) -> int:
    """Walk one request body of entity class `cls` from `pos`; return where it ends."""
    return _entity(cls)[0](buf, pos, len(buf))


# --------------------------------------------------------------------------------------------------------------
# steps
#
# A variable-size step first skips `lead`, the fixed-size fields before it (checked by its own bounds checks), so
# that an entity of fixed fields and one string, say, is one call. Lengths under 128 are one varint byte: read
# inline.


def _uvarint(buf: Buffer, pos: int, end: int, name: str) -> tuple[int, int]:
    if pos >= end:
        raise MalformedRequest(f"{name}: truncated")
    value = buf[pos]
    if value < 0x80:
        return value, pos + 1
    try:
        value, pos = read_uvarint(buf, pos)
    except VarintError as exc:
        raise MalformedRequest(f"{name}: {exc}") from None
    if pos > end:
        raise MalformedRequest(f"{name}: truncated varint")
    return value, pos


def _fixed(size: int, name: str) -> Step:
    def step(buf: Buffer, pos: int, end: int) -> int:
        pos += size
        if pos > end:
            raise MalformedRequest(f"{name}: truncated")
        return pos

    return step


def _null(name: str) -> MalformedRequest:
    return MalformedRequest(f"{name}: null where the field is not nullable")


def _overrun(name: str, declared: str, left: int) -> MalformedRequest:
    return MalformedRequest(f"{name}: {declared} but only {left} bytes left")


def _compact_bytes(name: str, nullable: bool, max_length: int | None, lead: int) -> Step:
    def step(buf: Buffer, pos: int, end: int) -> int:
        pos += lead
        if pos >= end:
            raise MalformedRequest(f"{name}: truncated")
        length = buf[pos]
        if length < 0x80:
            pos += 1
        else:
            length, pos = _uvarint(buf, pos, end, name)
        if length == 0:
            if nullable:
                return pos
            raise _null(name)
        length -= 1
        if max_length is not None and length > max_length:
            raise MalformedRequest(f"{name}: string of {length} bytes, longer than {max_length}")
        if length > end - pos:
            raise _overrun(name, f"length {length}", end - pos)
        return pos + length

    return step


def _legacy_bytes(name: str, nullable: bool, prefix: struct.Struct, lead: int) -> Step:
    def step(buf: Buffer, pos: int, end: int) -> int:
        pos += lead
        if pos + prefix.size > end:
            raise MalformedRequest(f"{name}: truncated")
        (length,) = prefix.unpack_from(buf, pos)
        pos += prefix.size
        if length < 0:
            if length == -1 and nullable:
                return pos
            raise _null(name) if length == -1 else MalformedRequest(f"{name}: negative length {length}")
        if length > end - pos:
            raise _overrun(name, f"length {length}", end - pos)
        return pos + length

    return step


def _array(
    name: str, nullable: bool, compact: bool, element: Step, element_size: int | None, lead: int
) -> Step:
    def step(buf: Buffer, pos: int, end: int) -> int:
        pos += lead
        if compact:
            count, pos = _uvarint(buf, pos, end, name)
            count -= 1
        else:
            if pos + 4 > end:
                raise MalformedRequest(f"{name}: truncated")
            (count,) = _INT32.unpack_from(buf, pos)
            pos += 4
        if count < 0:
            if count == -1 and nullable:
                return pos
            raise _null(name) if count == -1 else MalformedRequest(f"{name}: negative array length {count}")
        if count > end - pos:
            raise _overrun(name, f"array of {count} elements", end - pos)
        if element_size is not None:
            if count * element_size > end - pos:
                raise _overrun(name, f"array of {count} elements of {element_size} bytes", end - pos)
            return pos + count * element_size
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos

    return step


def _tagged_fields(name: str, known: dict[int, Step], lead: int) -> Step:
    def step(buf: Buffer, pos: int, end: int) -> int:
        pos += lead
        if pos < end and buf[pos] == 0:  # no tagged fields: the usual case
            return pos + 1
        count, pos = _uvarint(buf, pos, end, name + " tagged fields")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end, name + " tag")
            size, pos = _uvarint(buf, pos, end, f"{name} tag {tag}")
            if size > end - pos:
                raise _overrun(f"{name} tag {tag}", f"size {size}", end - pos)
            value = known.get(tag)
            # kio reads a known tag by its schema, ignoring the declared size: the value must fill it exactly.
            if value is not None and value(buf, pos, pos + size) != pos + size:
                raise MalformedRequest(f"{name} tag {tag}: value shorter than its size {size}")
            pos += size
        return pos

    return step


def _nullable_struct(name: str, body: Step, lead: int) -> Step:
    def step(buf: Buffer, pos: int, end: int) -> int:
        pos += lead
        if pos >= end:
            raise MalformedRequest(f"{name}: truncated")
        marker = buf[pos]
        if marker == 0xFF:  # -1: null
            return pos + 1
        if marker >= 0x80:
            # Kafka reads any negative marker as null, kio only -1: refuse what the two would read differently.
            raise MalformedRequest(f"{name}: invalid null marker {marker - 256}")
        return body(buf, pos + 1, end)

    return step


def _sequence(steps: list[Step]) -> Step:
    if len(steps) == 1:
        return steps[0]
    if len(steps) == 2:
        first, second = steps

        def pair(buf: Buffer, pos: int, end: int) -> int:
            return second(buf, first(buf, pos, end), end)

        return pair

    def step(buf: Buffer, pos: int, end: int) -> int:
        for s in steps:
            pos = s(buf, pos, end)
        return pos

    return step


# --------------------------------------------------------------------------------------------------------------
# compiling a kio entity class

Variable = Callable[[int], Step]  # lead -> step


def _is_nullable(field: dataclasses.Field) -> bool:
    # The field itself (`X | None`, `tuple[X, ...] | None`), not its elements.
    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)


def _primitive(kafka_type: str, name: str, flexible: bool, nullable: bool) -> int | Variable:
    """The size of a fixed-size primitive, or how to make the step of a variable-size one."""
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return size
    if kafka_type == "string":
        if flexible:
            return lambda lead: _compact_bytes(name, nullable, MAX_STRING_BYTES, lead)
        return lambda lead: _legacy_bytes(name, nullable, _INT16, lead)
    if kafka_type in ("bytes", "records"):
        if flexible:
            return lambda lead: _compact_bytes(name, nullable, None, lead)
        return lambda lead: _legacy_bytes(name, nullable, _INT32, lead)
    raise NotImplementedError(f"{name}: no length check for kafka type {kafka_type!r}")


def _field(owner: str, field: dataclasses.Field, flexible: bool) -> int | Variable:
    """The size of a fixed-size field, or how to make the step of a variable-size one."""
    name = f"{owner}.{field.name}"
    kind = classify_field(field)
    nullable = _is_nullable(field)
    if isinstance(kind, PrimitiveField):
        return _primitive(get_schema_field_type(field), name, flexible, nullable)
    if isinstance(kind, EntityField):
        body, size = _entity(kind.type_)
        if nullable:
            return lambda lead: _nullable_struct(name, body, lead)
        if size is not None:
            return size
        return lambda lead: _sequence([_fixed(lead, name), body]) if lead else body
    if isinstance(kind, PrimitiveTupleField):
        element = _primitive(get_schema_field_type(field), name + "[]", flexible, False)
        if isinstance(element, int):
            return lambda lead: _array(name, nullable, flexible, _fixed(element, name), element, lead)
        return lambda lead: _array(name, nullable, flexible, element(0), None, lead)
    if isinstance(kind, EntityTupleField):
        body, size = _entity(kind.type_)
        return lambda lead: _array(name, nullable, flexible, body, size, lead)
    raise NotImplementedError(f"{name}: unknown field kind {kind!r}")  # pragma: no cover


@cache
def _entity(cls: type) -> tuple[Step, int | None]:
    """The step of one entity (not null), and its size when all its fields have fixed sizes."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    owner = cls.__name__
    steps: list[Step] = []
    lead = 0  # bytes of consecutive fixed-size fields not yet stepped over
    tagged: dict[int, Step] = {}
    for field in dataclasses.fields(cls):
        spec = _field(owner, field, flexible)
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = _fixed(spec, owner) if isinstance(spec, int) else spec(0)
        elif isinstance(spec, int):
            lead += spec
        else:
            steps.append(spec(lead))
            lead = 0
    if flexible:
        steps.append(_tagged_fields(owner, tagged, lead))
    elif not steps:
        return _fixed(lead, owner), lead
    elif lead:
        steps.append(_fixed(lead, owner))
    return _sequence(steps), None
