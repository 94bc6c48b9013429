"""The record-batch codecs: compression for recompressed batches, and bounded, streaming decompression.

A compressed batch is a few kilobytes that may claim to expand to gigabytes, so nothing here decompresses
without a limit: `decompressed_chunks` yields the output in chunks of at most `CHUNK_SIZE` bytes and raises
`DecompressedTooLarge` as soon as the output passes `limit` (one chunk past it at most, or before
decompressing at all where the format declares its size). Every codec error
(garbage, truncation, a lying length) is a `CorruptPayload`. The libraries used (zlib, lz4, zstandard,
cramjam) release the GIL while they work, so this runs well on a worker thread.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import zstandard

from broker_runtime.protocol.varint import VarintError, read_uvarint

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}

CHUNK_SIZE = 64 * 1024
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic (8) + version (4) + compatible version (4)
_I32 = struct.Struct(">i")


class CorruptPayload(ValueError):
    """The payload does not decompress with its codec."""


class DecompressedTooLarge(ValueError):
    """The payload decompresses to more than the caller's limit."""


def compress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec}")


def decompress(codec: int, data: bytes, limit: int) -> bytes:
    """The whole output, if it is at most `limit` bytes."""
    return b"".join(decompressed_chunks(codec, data, limit))


def decompressed_chunks(codec: int, data: bytes, limit: int) -> Iterator[bytes]:
    """The output of `data` in order, in chunks of at most CHUNK_SIZE bytes, never more than `limit` in all."""
    produced = 0
    try:
        for chunk in _CODECS[codec](data, limit):
            produced += len(chunk)
            if produced > limit:
                raise DecompressedTooLarge(
                    f"{CODEC_NAMES[codec]} payload decompresses to more than {limit} bytes"
                )
            yield chunk
    except (DecompressedTooLarge, CorruptPayload):
        raise
    except KeyError:
        raise CorruptPayload(f"unknown compression codec {codec}") from None
    except Exception as exc:  # each library has its own error types
        raise CorruptPayload(f"{CODEC_NAMES[codec]} payload does not decompress: {exc}") from None


def _none(data: bytes, limit: int) -> Iterator[bytes]:
    yield data


def _gzip(data: bytes, limit: int) -> Iterator[bytes]:
    # Java writes one gzip member, but GZIPInputStream also reads concatenated members: so do we.
    rest = data
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = inflater.decompress(rest, CHUNK_SIZE)
        while chunk:
            yield chunk
            chunk = inflater.decompress(inflater.unconsumed_tail, CHUNK_SIZE)
        if not inflater.eof:
            raise CorruptPayload("gzip payload is truncated")
        rest = inflater.unused_data
        if not rest:
            return


def _lz4(data: bytes, limit: int) -> Iterator[bytes]:
    decompressor = lz4.frame.LZ4FrameDecompressor()
    chunk = decompressor.decompress(data, max_length=CHUNK_SIZE)
    while True:
        if chunk:
            yield chunk
        if decompressor.eof or decompressor.needs_input:
            break
        chunk = decompressor.decompress(b"", max_length=CHUNK_SIZE)
    if not decompressor.eof:
        raise CorruptPayload("lz4 frame is truncated")
    if decompressor.unused_data:
        raise CorruptPayload("bytes after the end of the lz4 frame")


_per_thread = threading.local()


def _zstd(data: bytes, limit: int) -> Iterator[bytes]:
    # Setting up a decompression context costs about a third of a small batch's check, so each thread keeps
    # one. A stream takes it and gives it back only once read to its end: a stream abandoned half-way (an
    # error, a bomb) or still open keeps its own, and a context never serves two streams at once.
    decompressor = getattr(_per_thread, "zstd", None) or zstandard.ZstdDecompressor()
    _per_thread.zstd = None
    with decompressor.stream_reader(data, read_across_frames=True) as reader:
        while chunk := reader.read(CHUNK_SIZE):
            yield chunk
    _per_thread.zstd = decompressor


def _snappy(data: bytes, limit: int) -> Iterator[bytes]:
    """Java clients frame snappy the xerial way (magic, then length-prefixed blocks); librdkafka sends one raw
    block. A raw block starts with its decompressed length, checked against the limit before decompressing."""
    if not data.startswith(_XERIAL_MAGIC):
        yield _snappy_block(data, limit)
        return
    pos = _XERIAL_HEADER_SIZE
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptPayload("xerial snappy block length is truncated")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptPayload("xerial snappy block runs past the end of the payload")
        block = _snappy_block(data[pos : pos + size], limit)
        limit -= len(block)
        yield block
        pos += size


def _snappy_block(block: bytes, limit: int) -> bytes:
    try:
        length, _ = read_uvarint(block, 0)
    except VarintError as exc:
        raise CorruptPayload(f"snappy block length: {exc}") from None
    if length > limit:
        raise DecompressedTooLarge(f"snappy payload decompresses to more than {limit} bytes")
    return bytes(cramjam.snappy.decompress_raw(block))


_CODECS = {CODEC_NONE: _none, CODEC_GZIP: _gzip, CODEC_SNAPPY: _snappy, CODEC_LZ4: _lz4, CODEC_ZSTD: _zstd}
