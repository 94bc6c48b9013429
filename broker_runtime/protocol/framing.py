"""Sans-I/O framing: request headers and bodies in, framed responses out. No sockets, no asyncio.

A Kafka frame is a 4-byte big-endian size followed by that many bytes (split out of the byte stream by
protocol/connection.py). A request starts with a header
(api key, api version, correlation id, client id, and tagged fields when the request version is flexible);
the body is decoded with `kio`. Anything that does not parse raises `FrameError`, and the connection that
sent it is closed: Kafka does the same, because a client that sent one bad frame has lost sync.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from functools import cache
from typing import Any, NamedTuple

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema
from kio.serial import entity_reader, entity_writer

from broker_runtime.protocol import inter_broker
from broker_runtime.protocol.request_check import MalformedRequest, body_check
from broker_runtime.protocol.varint import VarintError, read_uvarint

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_CORRELATION = struct.Struct(">i")


class FrameError(Exception):
    """The byte stream cannot be understood; the connection must be closed."""


class UnsupportedVersion(FrameError):
    """A known API at a version this broker does not serve."""

    def __init__(self, header: RequestHeader, message: str) -> None:
        super().__init__(message)
        self.header = header


class RequestHeader(NamedTuple):  # a tuple: built per request, cheaper than a frozen dataclass
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class EncodedBody(NamedTuple):
    """A response body already in wire form (hand-encoded hot-path responses), as parts in order: framed by
    `encode_response`, small parts are joined once and large ones (records) are sent as they are."""

    parts: tuple[bytes | bytearray | memoryview, ...]
    flexible: bool

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)


@cache
def request_class(api_key: int, api_version: int) -> Any:
    schema = inter_broker.SCHEMAS.get((api_key, api_version))  # the controller's requests, which kio lacks
    if schema is not None:
        return schema[0]
    return load_request_schema(api_key, api_version)


@cache
def _reader(cls: Any) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: Any) -> Any:
    return entity_writer(cls)


def parse_header(frame: memoryview) -> tuple[RequestHeader, int]:
    """Return the header and where the body starts (tagged fields skipped for flexible versions)."""
    if len(frame) < _HEADER_FIXED.size:
        raise FrameError(f"frame of {len(frame)} bytes is too short for a request header")
    api_key, api_version, correlation_id, client_id_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id = None
    if client_id_len >= 0:
        if pos + client_id_len > len(frame):
            raise FrameError("client id runs past the end of the frame")
        client_id = str(frame[pos : pos + client_id_len], "utf-8", "replace")
        pos += client_id_len
    return _new_header(RequestHeader, (api_key, api_version, correlation_id, client_id)), pos


_new_header = tuple.__new__  # RequestHeader's own __new__ is a Python function: one call fewer per request


def decode_body(header: RequestHeader, frame: memoryview, pos: int) -> Any:
    """Decode the request body with kio; raises FrameError on anything malformed."""
    decoder = _decoders.get((header.api_key, header.api_version))
    if decoder is None:
        decoder = _decoder(header)
    cls, check, read = decoder
    if cls.__flexible__:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields: the usual case
            pos += 1
        else:
            pos = skip_header_tagged_fields(frame, pos)
    try:
        # Lengths and nulls first: kio trusts length prefixes (see request_check).
        check(frame, pos, len(frame))
    except MalformedRequest as exc:
        raise FrameError(f"malformed {cls.__name__} v{header.api_version}: {exc}") from None
    try:
        body, _ = read(frame, pos)
    except Exception as exc:  # kio raises assorted errors on malformed input
        raise FrameError(f"malformed {cls.__name__} v{header.api_version}: {exc!r}") from None
    # Bytes after the body are ignored, as Kafka ignores them: librdkafka's Metadata v11 carries some.
    return body


# (api key, version) -> (kio request class, its request_check walk, its kio reader): one look-up per request
_decoders: dict[tuple[int, int], tuple[Any, Any, Any]] = {}


def _decoder(header: RequestHeader) -> tuple[Any, Any, Any]:
    try:
        cls = request_class(header.api_key, header.api_version)
    except (UnknownAPIKey, UnknownEntity) as exc:
        raise UnsupportedVersion(
            header, f"api {header.api_key} v{header.api_version} is not supported"
        ) from exc
    decoder = _decoders[header.api_key, header.api_version] = (cls, body_check(cls), _reader(cls))
    return decoder


def skip_header_tagged_fields(frame: bytes | memoryview, pos: int, header: str = "request") -> int:
    """The position after a flexible header's tagged fields (skipped: none is read here)."""
    try:
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
    except VarintError as exc:
        raise FrameError(f"{header} header tagged fields: {exc}") from None
    if pos > len(frame):
        raise FrameError(f"{header} header tagged fields run past the end of the frame")
    return pos


# A part this large (a follower's records) is sent on its own rather than copied into a joined frame: one more
# send costs less than copying it (and touching fresh pages for the copy).
SEPARATE_CHUNK_BYTES = 64 * 1024
Chunk = bytes | bytearray | memoryview


def frame_chunks(parts: Iterable[Chunk]) -> tuple[Chunk, ...]:
    """`parts` to send in order, runs of small ones joined, large ones alone."""
    out: list[Chunk] = []
    run: list[Chunk] = []
    for part in parts:
        if len(part) < SEPARATE_CHUNK_BYTES:
            run.append(part)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(part)
    if run:
        out.append(b"".join(run))
    return tuple(out)


def encode_response(
    correlation_id: int, response: Any, *, header_v0: bool = False
) -> bytes | tuple[Chunk, ...]:
    """Frame a kio response: size, correlation id, tagged fields (flexible, except ApiVersions), body. A
    hand-encoded body with a large part comes as chunks to send in order (`frame_chunks`)."""
    if isinstance(response, EncodedBody):
        tag = b"\x00" if response.flexible else b""
        parts = response.parts
        head = (
            _SIZE.pack(4 + len(tag) + sum(len(part) for part in parts)),
            _CORRELATION.pack(correlation_id),
            tag,
        )
        chunks = frame_chunks((*head, *parts))
        return chunks[0] if len(chunks) == 1 else chunks
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(_CORRELATION.pack(correlation_id))
    if response.__flexible__ and not header_v0:
        out.write(b"\x00")
    _writer(type(response))(out, response)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return out.getvalue()
