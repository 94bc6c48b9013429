"""Lengths and nulls of a request body, checked against its schema before kio decodes it.

kio 0.6's native reader trusts length prefixes: it reserves room for an array's declared element count before
reading a single element, so a 20-byte request whose compact array length is a huge varint makes it allocate
tens of GB and abort the process. It also reads a null array as None where the message spec does not allow
null. Kafka's generated readers refuse both ("Tried to allocate a collection of size N, but there are only R
bytes remaining", "non-nullable field X was serialized as null"), and so does this walk, whatever kio does.

`check_request(cls, buf, pos)` walks the body along the same schema kio reads: the kio entity dataclasses and
their field metadata, classified with the introspection helpers kio's own schema compiler uses. Each request
class compiles once into one generated Python function `(buf, pos, end) -> pos` (kio generates its readers the
same way), its nested entities and array elements inline: consecutive fixed-size fields are one addition, and
an array of fixed-size elements is skipped in one step. It raises `MalformedRequest` for a truncated
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


def body_check(cls: type) -> Step:
    """The walk of request bodies of entity class `cls`: `(buf, pos, len(buf)) -> end`, as check_request."""
    return _entity(cls)[0]


# --------------------------------------------------------------------------------------------------------------
# compiling a kio entity class into Python source
#
# Each entity class becomes one generated function `walk(buf, pos, end) -> pos` whose body inlines its fields,
# the elements of its arrays and its nested entities (a walk of a request is one call, not one per field). Runs
# of fixed-size fields become one `lead` added before the next variable-size field, which checks the bytes left
# itself; an array of fixed-size elements is skipped in one step. Lengths under 128 are one varint byte: read
# inline. Field names in the messages are constants of the generated code.

_MAX_INLINE_DEPTH = 8  # nested blocks past this call a function of their own (Python allows 20)


def _uvarint(buf: Buffer, pos: int, end: int, name: str) -> tuple[int, int]:
    if pos >= end:
        raise MalformedRequest(f"{name}: truncated")
    value = buf[pos]
    if value < 0x80:
        return value, pos + 1
    if pos + 2 < end:  # lengths under 2**21 (a batch of up to 2 MiB) without the general loop
        second = buf[pos + 1]
        if second < 0x80:
            return (value & 0x7F) | second << 7, pos + 2
        third = buf[pos + 2]
        if third < 0x80:
            return (value & 0x7F) | (second & 0x7F) << 7 | third << 14, pos + 3
    try:
        value, pos = read_uvarint(buf, pos)
    except VarintError as exc:
        raise MalformedRequest(f"{name}: {exc}") from None
    if pos > end:
        raise MalformedRequest(f"{name}: truncated varint")
    return value, pos


def _null(name: str) -> MalformedRequest:
    return MalformedRequest(f"{name}: null where the field is not nullable")


def _overrun(name: str, declared: str, left: int) -> MalformedRequest:
    return MalformedRequest(f"{name}: {declared} but only {left} bytes left")


def _tagged_fields(buf: Buffer, pos: int, end: int, name: str, known: dict[int, Step]) -> int:
    """Tagged fields after an entity's fields (the generated code reads the usual empty set inline)."""
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


def _is_nullable(field: dataclasses.Field) -> bool:
    # The field itself (`X | None`, `tuple[X, ...] | None`), not its elements.
    return get_origin(field.type) in (UnionType, Union) and NoneType in get_args(field.type)


def _primitive_size(kafka_type: str, name: str) -> int | None:
    """The size of a fixed-size primitive; None for strings and bytes."""
    size = _FIXED_SIZES.get(kafka_type)
    if size is None and kafka_type not in ("string", "bytes", "records"):
        raise NotImplementedError(f"{name}: no length check for kafka type {kafka_type!r}")
    return size


def _field_size(owner: str, field: dataclasses.Field) -> int | None:
    """The size of a fixed-size field; None when its size is in the bytes."""
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField):
        return _primitive_size(get_schema_field_type(field), f"{owner}.{field.name}")
    if isinstance(kind, EntityField) and not _is_nullable(field):
        return _entity_size(kind.type_)
    return None


@cache
def _entity_size(cls: type) -> int | None:
    """The size of an entity all of whose fields have fixed sizes (never a flexible one: its tags vary)."""
    if cls.__flexible__:  # type: ignore[attr-defined]
        return None
    total = 0
    for field in dataclasses.fields(cls):
        size = _field_size(cls.__name__, field)
        if size is None:
            return None
        total += size
    return total


class _Source:
    """The lines of one generated function and the constants they refer to."""

    def __init__(self, namespace: dict[str, object]) -> None:
        self.namespace = namespace
        self.lines: list[str] = []

    def const(self, value: object) -> str:
        name = f"_k{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def skip(self, depth: int, lead: int) -> None:
        if lead:
            self.add(depth, f"pos += {lead}")


def _compile(cls: type) -> Step:
    """Generate, compile and return the walk of entity `cls` (not null)."""
    namespace: dict[str, object] = {
        "_uvarint": _uvarint, "_null": _null, "_overrun": _overrun, "_tagged_fields": _tagged_fields,
        "MalformedRequest": MalformedRequest, "_INT16": _INT16, "_INT32": _INT32,
    }  # fmt: skip
    return _function(namespace, f"walk_{cls.__name__}", lambda src: _emit_entity(src, cls, 1))


def _function(namespace: dict[str, object], name: str, emit: Callable[[_Source], None]) -> Step:
    src = _Source(namespace)
    src.add(0, f"def {name}(buf, pos, end):")
    emit(src)
    src.add(1, "return pos")
    exec(compile("\n".join(src.lines), f"<request_check {name}>", "exec"), namespace)
    return namespace[name]  # type: ignore[return-value]


def _emit_entity(src: _Source, cls: type, depth: int) -> None:
    """The fields of one entity, from `pos` (its fixed-size fields as leads of the variable-size ones)."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    owner = cls.__name__
    lead = 0  # bytes of consecutive fixed-size fields not yet stepped over
    tagged: dict[int, Step] = {}
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        size = _field_size(owner, field)
        if tag is not None:
            tagged[int(tag)] = _function(
                src.namespace, f"tag_{owner}_{tag}_{len(src.namespace)}",
                lambda tag_src, field=field, size=size: (
                    _emit_fixed(tag_src, 1, size, owner) if size is not None
                    else _emit_field(tag_src, owner, field, flexible, 0, 1)
                ),
            )  # fmt: skip
        elif size is not None:
            lead += size
        else:
            _emit_field(src, owner, field, flexible, lead, depth)
            lead = 0
    if flexible:
        src.skip(depth, lead)
        src.add(depth, "if pos < end and buf[pos] == 0:  # no tagged fields: the usual case")
        src.add(depth + 1, "pos += 1")
        src.add(depth, "else:")
        src.add(depth + 1, f"pos = _tagged_fields(buf, pos, end, {src.const(owner)}, {src.const(tagged)})")
    elif lead:
        _emit_fixed(src, depth, lead, owner)


def _emit_fixed(src: _Source, depth: int, size: int, name: str) -> None:
    src.skip(depth, size)
    src.add(depth, f"if pos > end: raise MalformedRequest({src.const(name + ': truncated')})")


def _emit_field(
    src: _Source, owner: str, field: dataclasses.Field, flexible: bool, lead: int, depth: int
) -> None:
    """One variable-size field, after `lead` bytes of fixed-size ones."""
    name = f"{owner}.{field.name}"
    kind = classify_field(field)
    nullable = _is_nullable(field)
    if isinstance(kind, PrimitiveField):
        _emit_bytes(src, depth, get_schema_field_type(field), name, flexible, nullable, lead)
    elif isinstance(kind, EntityField):
        if nullable:
            _emit_nullable_struct(src, depth, kind.type_, name, lead)
        else:
            if lead:
                _emit_fixed(src, depth, lead, name)
            _emit_nested(src, depth, kind.type_)
    elif isinstance(kind, PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        size = _primitive_size(kafka_type, name + "[]")
        _emit_array(src, depth, name, nullable, flexible, lead, size, lambda d: _emit_bytes(
            src, d, kafka_type, name + "[]", flexible, False, 0))  # fmt: skip
    elif isinstance(kind, EntityTupleField):
        element = kind.type_
        _emit_array(src, depth, name, nullable, flexible, lead, _entity_size(element),
                    lambda d: _emit_nested(src, d, element))  # fmt: skip
    else:  # pragma: no cover
        raise NotImplementedError(f"{name}: unknown field kind {kind!r}")


def _emit_nested(src: _Source, depth: int, cls: type) -> None:
    """An entity inside another: inline, or a call when the blocks nest too deep."""
    size = _entity_size(cls)
    if size is not None:
        _emit_fixed(src, depth, size, cls.__name__)
    elif depth <= _MAX_INLINE_DEPTH:
        _emit_entity(src, cls, depth)
    else:
        src.add(depth, f"pos = {src.const(_entity(cls)[0])}(buf, pos, end)")


def _emit_bytes(
    src: _Source, depth: int, kafka_type: str, name: str, flexible: bool, nullable: bool, lead: int
) -> None:
    """A string, bytes or records field: compact (flexible versions) or with an int16/int32 length."""
    n = src.const(name)
    src.skip(depth, lead)
    if flexible:
        src.add(depth, f"if pos >= end: raise MalformedRequest({src.const(name + ': truncated')})")
        src.add(depth, "length = buf[pos]")
        src.add(depth, "if length < 0x80:")
        src.add(depth + 1, "pos += 1")
        src.add(depth, "else:")
        src.add(depth + 1, f"length, pos = _uvarint(buf, pos, end, {n})")
        src.add(depth, "if length == 0:")
        src.add(depth + 1, "pass" if nullable else f"raise _null({n})")
        src.add(depth, "else:")
        src.add(depth + 1, "length -= 1")
        if kafka_type == "string":
            src.add(depth + 1, f"if length > {MAX_STRING_BYTES}:")
            src.add(depth + 2, f"raise MalformedRequest(f'{{{n}}}: string of {{length}} bytes, longer than "
                               f"{MAX_STRING_BYTES}')")  # fmt: skip
        src.add(depth + 1, f"if length > end - pos: raise _overrun({n}, f'length {{length}}', end - pos)")
        src.add(depth + 1, "pos += length")
        return
    prefix, width = ("_INT16", 2) if kafka_type == "string" else ("_INT32", 4)
    src.add(depth, f"if pos + {width} > end: raise MalformedRequest({src.const(name + ': truncated')})")
    src.add(depth, f"(length,) = {prefix}.unpack_from(buf, pos)")
    src.add(depth, f"pos += {width}")
    src.add(depth, "if length < 0:")
    src.add(depth + 1, "if length != -1:")
    src.add(depth + 2, f"raise MalformedRequest(f'{{{n}}}: negative length {{length}}')")
    if not nullable:
        src.add(depth + 1, f"raise _null({n})")
    src.add(depth, "else:")
    src.add(depth + 1, f"if length > end - pos: raise _overrun({n}, f'length {{length}}', end - pos)")
    src.add(depth + 1, "pos += length")


def _emit_array(
    src: _Source, depth: int, name: str, nullable: bool, compact: bool, lead: int, element_size: int | None,
    emit_element: Callable[[int], None],
) -> None:  # fmt: skip
    n = src.const(name)
    count = f"count{depth}"
    src.skip(depth, lead)
    if compact:
        src.add(depth, f"if pos >= end: raise MalformedRequest({src.const(name + ': truncated')})")
        src.add(depth, f"{count} = buf[pos]")
        src.add(depth, f"if {count} < 0x80:")
        src.add(depth + 1, "pos += 1")
        src.add(depth, "else:")
        src.add(depth + 1, f"{count}, pos = _uvarint(buf, pos, end, {n})")
        src.add(depth, f"{count} -= 1")
    else:
        src.add(depth, f"if pos + 4 > end: raise MalformedRequest({src.const(name + ': truncated')})")
        src.add(depth, f"({count},) = _INT32.unpack_from(buf, pos)")
        src.add(depth, "pos += 4")
    src.add(depth, f"if {count} < 0:")
    src.add(depth + 1, f"if {count} != -1:")
    src.add(depth + 2, f"raise MalformedRequest(f'{{{n}}}: negative array length {{{count}}}')")
    if not nullable:
        src.add(depth + 1, f"raise _null({n})")
    src.add(depth, "else:")
    src.add(
        depth + 1, f"if {count} > end - pos: raise _overrun({n}, f'array of {{{count}}} elements', end - pos)"
    )
    if element_size is not None:
        src.add(depth + 1, f"if {count} * {element_size} > end - pos:")
        src.add(depth + 2, f"raise _overrun({n}, f'array of {{{count}}} elements of {element_size} bytes', "
                           "end - pos)")  # fmt: skip
        src.add(depth + 1, f"pos += {count} * {element_size}")
    else:
        src.add(depth + 1, f"for _ in range({count}):")
        emit_element(depth + 2)


def _emit_nullable_struct(src: _Source, depth: int, cls: type, name: str, lead: int) -> None:
    src.skip(depth, lead)
    src.add(depth, f"if pos >= end: raise MalformedRequest({src.const(name + ': truncated')})")
    src.add(depth, "marker = buf[pos]")
    src.add(depth, "if marker == 0xFF:  # -1: null")
    src.add(depth + 1, "pos += 1")
    # Kafka reads any negative marker as null, kio only -1: refuse what the two would read differently.
    src.add(depth, "elif marker >= 0x80:")
    src.add(
        depth + 1, f"raise MalformedRequest(f'{{{src.const(name)}}}: invalid null marker {{marker - 256}}')"
    )
    src.add(depth, "else:")
    src.add(depth + 1, "pos += 1")
    _emit_nested(src, depth + 1, cls)


@cache
def _entity(cls: type) -> tuple[Step, int | None]:
    """The walk of one entity (not null), and its size when all its fields have fixed sizes."""
    size = _entity_size(cls)
    if size is not None:
        src_name = cls.__name__

        def fixed(buf: Buffer, pos: int, end: int) -> int:
            pos += size
            if pos > end:
                raise MalformedRequest(f"{src_name}: truncated")
            return pos

        return fixed, size
    return _compile(cls), None
