"""Readers and writers of the fields in coordinator log records (`__consumer_offsets`, `__transaction_state`).

Kafka generates these records from its message JSON like protocol messages: an int16 version first, then
classic encodings (int16-length strings, int32-length bytes and arrays) or, in "flexible" versions, compact ones
(unsigned-varint length+1) and a tagged-field section closing every struct.
"""

from __future__ import annotations

import struct

from broker_runtime.protocol.varint import VarintError, read_uvarint, write_uvarint


class RecordFormatError(ValueError):
    """A coordinator log record's key or value that does not parse."""


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordReader:
    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, flexible: bool = False) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise RecordFormatError(
                f"truncated: need {n} bytes at {self.pos}, have {len(self.buf) - self.pos}"
            )
        out = bytes(self.buf[self.pos : end])
        self.pos = end
        return out

    def _unpack(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.buf):
            raise RecordFormatError(f"truncated: need {fmt.size} bytes at {self.pos}")
        (value,) = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return value

    def int8(self) -> int:
        return self._unpack(_I8)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def int64(self) -> int:
        return self._unpack(_I64)

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.buf, self.pos)
        except VarintError as exc:
            raise RecordFormatError(str(exc)) from None
        return value

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("null where a non-nullable string is required")
        return s

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise RecordFormatError("null where non-nullable bytes are required")
        return self._take(n)

    def nullable_array_length(self) -> int:
        """An array's length; -1 for null."""
        return self.uvarint() - 1 if self.flexible else self.int32()

    def array_length(self) -> int:
        n = self.nullable_array_length()
        if n < 0:
            raise RecordFormatError("null where a non-nullable array is required")
        return n

    def skip_tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


class RecordWriter:
    __slots__ = ("flexible", "out")

    def __init__(self, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def int8(self, v: int) -> None:
        self.out += _I8.pack(v)

    def int16(self, v: int) -> None:
        self.out += _I16.pack(v)

    def int32(self, v: int) -> None:
        self.out += _I32.pack(v)

    def int64(self, v: int) -> None:
        self.out += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        write_uvarint(self.out, v)

    def nullable_string(self, s: str | None) -> None:
        if s is None:
            self.uvarint(0) if self.flexible else self.int16(-1)
            return
        data = s.encode("utf-8")
        if len(data) > 0x7FFF and not self.flexible:
            raise RecordFormatError(f"string of {len(data)} bytes does not fit an int16 length")
        self.uvarint(len(data) + 1) if self.flexible else self.int16(len(data))
        self.out += data

    def string(self, s: str) -> None:
        self.nullable_string(s)

    def bytes_(self, b: bytes) -> None:
        self.uvarint(len(b) + 1) if self.flexible else self.int32(len(b))
        self.out += b

    def array_length(self, n: int) -> None:
        """An array's length; -1 writes null."""
        self.uvarint(n + 1) if self.flexible else self.int32(n)

    def no_tagged_fields(self) -> None:
        if self.flexible:
            self.uvarint(0)
