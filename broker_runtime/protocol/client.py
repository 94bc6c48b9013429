"""Sans-I/O framing for the client side of the protocol, used when a broker talks to another broker (the
controller's requests, and later followers' fetches): encode a request frame, decode a response frame."""

from __future__ import annotations

import io
import struct
from functools import cache
from typing import Any

from kio.index import load_response_schema

from broker_runtime.protocol import inter_broker
from broker_runtime.protocol.framing import FrameError, _reader, _writer, skip_header_tagged_fields

_HEADER = struct.Struct(">ihhi")  # size placeholder, api key, api version, correlation id
_CLIENT_ID = struct.Struct(">h")
_CORRELATION = struct.Struct(">i")
API_VERSIONS_KEY = 18


@cache
def response_class(api_key: int, api_version: int) -> Any:
    schema = inter_broker.SCHEMAS.get((api_key, api_version))
    if schema is not None:
        return schema[1]
    return load_response_schema(api_key, api_version)


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """A whole frame: size, request header (v1, or v2 with empty tagged fields for flexible versions), body."""
    out = io.BytesIO()
    out.write(_HEADER.pack(0, int(request.__api_key__), int(request.__version__), correlation_id))
    if client_id is None:
        out.write(_CLIENT_ID.pack(-1))
    else:
        raw = client_id.encode()
        out.write(_CLIENT_ID.pack(len(raw)) + raw)
    if request.__flexible__:
        out.write(b"\x00")
    _writer(type(request))(out, request)
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    del data
    return out.getvalue()


def response_correlation_id(frame: bytes | memoryview) -> int:
    if len(frame) < 4:
        raise FrameError(f"response frame of {len(frame)} bytes has no correlation id")
    return _CORRELATION.unpack_from(frame, 0)[0]


def decode_response(frame: bytes | memoryview, api_key: int, api_version: int) -> Any:
    """Decode a response frame (without its size prefix) of the given API and version."""
    cls = response_class(api_key, api_version)
    pos = 4
    if cls.__flexible__ and api_key != API_VERSIONS_KEY:
        pos = skip_header_tagged_fields(frame, pos, "response")
    try:
        body, _ = _reader(cls)(frame, pos)
    except Exception as exc:
        raise FrameError(f"malformed {cls.__name__} v{api_version}: {exc!r}") from exc
    return body
