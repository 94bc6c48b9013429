"""The inter-broker connection cuts its byte stream into whole response frames however the socket splits it."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.cluster import broker_client
from broker_runtime.cluster.broker_client import _ResponseReader
from broker_runtime.protocol.framing import FrameError


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


def _reader() -> tuple[_ResponseReader, list[bytes], list[BaseException]]:
    frames: list[bytes] = []
    lost: list[BaseException] = []
    reader = _ResponseReader(lambda frame: frames.append(bytes(frame)), lost.append)
    reader.transport = _Transport()  # type: ignore[assignment]  # no event loop: the test is the socket
    return reader, frames, lost


def _feed(reader: _ResponseReader, data: bytes, cuts: list[int]) -> None:
    """Deliver `data` as the socket would: each read fills at most what get_buffer offers, split at `cuts`."""
    pos = 0
    for cut in [*sorted(c for c in set(cuts) if c < len(data)), len(data)]:
        while pos < cut:
            buffer = reader.get_buffer(-1)
            assert len(buffer) > 0, "get_buffer offered no room"
            n = min(len(buffer), cut - pos)
            buffer[:n] = data[pos : pos + n]
            reader.buffer_updated(n)
            pos += n


def _framed(bodies: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


sizes = st.one_of(st.integers(4, 64), st.integers(4, 3 * broker_client._SCRATCH_BYTES))


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(sizes, min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 10 * broker_client._SCRATCH_BYTES), max_size=12),
)
def test_every_frame_arrives_whole_and_in_order_however_the_reads_split_the_stream(lengths, cuts) -> None:
    bodies = [bytes([i % 251]) * n for i, n in enumerate(lengths)]
    reader, frames, lost = _reader()
    _feed(reader, _framed(bodies), cuts)
    assert frames == bodies
    assert not lost


def test_frames_split_byte_by_byte_arrive_whole() -> None:
    bodies = [b"abcd", b"x" * 5000, b"efgh" * 3]
    stream = _framed(bodies)
    reader, frames, lost = _reader()
    _feed(reader, stream, list(range(len(stream))))
    assert frames == bodies and not lost


def test_a_frame_larger_than_the_scratch_buffer_gets_its_own_buffer() -> None:
    big = bytes(range(256)) * (broker_client._SCRATCH_BYTES // 64)
    reader, frames, lost = _reader()
    _feed(reader, _framed([b"head", big, b"tail"]), [10, 1000])
    assert frames == [b"head", big, b"tail"] and not lost


def test_a_frame_size_out_of_bounds_closes_the_connection() -> None:
    reader, frames, lost = _reader()
    _feed(reader, struct.pack(">i", 2) + b"xx", [])
    assert frames == []
    assert len(lost) == 1 and isinstance(lost[0], FrameError)
    assert reader.transport.is_closing()  # type: ignore[union-attr]
