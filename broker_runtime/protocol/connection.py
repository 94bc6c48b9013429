"""One client connection's protocol state, without I/O: bytes in, request frames out; responses in, bytes out in
request order. The asyncio adapter (server/connection.py) only moves bytes and runs handlers.

Input. `receive_data(data)` keeps what the socket delivered; `next_frame()` returns the next complete request
frame, or None when it needs more bytes or room in the memory pool. As Kafka's NetworkReceive does, the 4-byte
size is read first and checked against `socket.request.max.bytes`, then the frame's whole size is reserved from
the broker's request memory pool (`queued.max.request.bytes`) before its bytes are gathered. While the pool
refuses, `waiting_for_memory` is true: the adapter stops reading the socket and asks again once memory is
released, so a connection never holds more than the chunk it already received beyond what the pool granted. A
frame lying whole inside one received chunk is handed out as a view of it; a frame spanning chunks is gathered
into one buffer of its declared size.

Output. Every request frame takes a slot in arrival order (`open_slot`). `complete(slot, response)` encodes the
response (None: the request has none, acks=0 produce) and `data_to_send()` returns the encoded responses at the
head of the queue, so a later request that finishes first waits for the earlier ones. A request that can get no
response (its handler failed or was cancelled, its response could not be encoded) leaves its slot open: the
adapter must close the connection, because the client would otherwise wait for that answer forever or match a
later answer to it.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from broker_runtime.protocol.framing import Chunk, FrameError, encode_response

_SIZE = struct.Struct(">i")
API_VERSIONS = 18  # answered with response header v0 at every version (KIP-511)


class Frame:
    """One request frame: its bytes (read-only) and how much of the memory pool it holds."""

    __slots__ = ("payload", "reserved")

    def __init__(self, payload: memoryview, reserved: int) -> None:
        self.payload = payload
        self.reserved = reserved


class Slot:
    """A request's place in the response order."""

    __slots__ = ("correlation_id", "done", "header_v0", "payload")

    def __init__(self, correlation_id: int, header_v0: bool) -> None:
        self.correlation_id = correlation_id
        self.header_v0 = header_v0
        self.done = False
        self.payload: bytes | tuple[Chunk, ...] | None = None  # a tuple: chunks of one frame, sent in order


class ServerConnection:
    def __init__(self, max_request_size: int, reserve: Callable[[int], bool] | None = None) -> None:
        self._max_size = max_request_size
        self._reserve = reserve  # takes bytes from the memory pool; None: no pool
        self._chunks: deque[memoryview] = (
            deque()
        )  # received, not yet in a frame; the first may be partly used
        self._buffered = 0
        self._size: int | None = None  # size of the frame being read, once its 4 bytes are in
        self._reserved = 0  # pool bytes held for that frame
        self._gathered: bytearray | None = None  # a frame spanning chunks, as it fills
        self._slots: deque[Slot] = deque()
        self.waiting_for_memory = False

    # --- input ----------------------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        if data:
            self._chunks.append(memoryview(data))
            self._buffered += len(data)

    @property
    def buffered(self) -> int:
        """Received bytes not yet handed out in a frame."""
        return self._buffered + (len(self._gathered) if self._gathered is not None else 0)

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None (more bytes needed, or `waiting_for_memory`). Raises FrameError
        for a size outside 0..max_request_size."""
        if self._size is None:
            chunks = self._chunks
            if chunks and len(chunks[0]) >= 4:  # the usual case: size and frame inside the first chunk
                first = chunks[0]
                (size,) = _SIZE.unpack_from(first)
                end = 4 + size
                if 0 <= size <= self._max_size and len(first) >= end and self._reserve is None:
                    if len(first) == end:
                        chunks.popleft()
                    else:
                        chunks[0] = first[end:]
                    self._buffered -= end
                    return Frame(first[4:end], 0)
            if self._buffered < 4:
                return None
            (size,) = _SIZE.unpack(self._take(4))
            if size < 0 or size > self._max_size:
                raise FrameError(
                    f"frame of {size} bytes is outside 0..socket.request.max.bytes ({self._max_size})"
                )
            self._size = size
        size = self._size
        if not self._reserved and size and self._reserve is not None:
            if not self._reserve(size):
                self.waiting_for_memory = True
                return None
            self._reserved = size
        self.waiting_for_memory = False
        gathered = self._gathered
        if gathered is None:
            if self._chunks and len(self._chunks[0]) >= size:
                return self._frame(self._take(size))  # a view of the chunk, no copy
            if self._buffered == 0 and size:
                return None
            gathered = self._gathered = bytearray()
        while len(gathered) < size and self._chunks:
            gathered += self._take(min(len(self._chunks[0]), size - len(gathered)))
        if len(gathered) < size:
            return None
        self._gathered = None
        return self._frame(memoryview(gathered).toreadonly())

    def release_all(self) -> int:
        """Drop what is buffered (the connection is closing); return the pool bytes to release."""
        reserved, self._reserved = self._reserved, 0
        self._chunks.clear()
        self._buffered = 0
        self._gathered = None
        return reserved

    def _frame(self, payload: memoryview) -> Frame:
        frame = Frame(payload, self._reserved)
        self._size = None
        self._reserved = 0
        return frame

    def _take(self, n: int) -> memoryview:
        """The next `n` received bytes (n <= buffered): a view when they lie in one chunk, else a copy."""
        first = self._chunks[0]
        self._buffered -= n
        if len(first) > n:
            self._chunks[0] = first[n:]
            return first[:n]
        if len(first) == n:
            self._chunks.popleft()
            return first
        out = bytearray()
        while len(out) < n:
            chunk = self._chunks.popleft()
            need = n - len(out)
            if len(chunk) > need:
                self._chunks.appendleft(chunk[need:])
                chunk = chunk[:need]
            out += chunk
        return memoryview(out).toreadonly()

    # --- output ---------------------------------------------------------------------------------------------

    def open_slot(self, correlation_id: int, api_key: int) -> Slot:
        slot = Slot(correlation_id, api_key == API_VERSIONS)
        self._slots.append(slot)
        return slot

    def complete(self, slot: Slot, response: Any) -> None:
        """Record `slot`'s response (None: none is sent). Raises what encoding raises, leaving the slot open."""
        if response is not None:
            slot.payload = encode_response(slot.correlation_id, response, header_v0=slot.header_v0)
        slot.done = True

    def data_to_send(self) -> list[bytes | tuple[Chunk, ...]]:
        """Responses that may leave now: those of the completed requests at the head of the order (a large one
        as a tuple of chunks, see `frame_chunks`)."""
        out = []
        slots = self._slots
        while slots and slots[0].done:
            payload = slots.popleft().payload
            if payload is not None:
                out.append(payload)
        return out

    @property
    def in_flight(self) -> int:
        """Requests read and not yet answered."""
        return len(self._slots)
