"""Transaction markers as control records (Kafka's EndTransactionMarker and ControlRecordType).

A marker is a control batch (attributes: transactional + control) of one record whose key is
`version int16 (=0) | type int16` (0 = ABORT, 1 = COMMIT) and whose value is
`version int16 (=0) | coordinator_epoch int32`. An empty control batch is a marker the log cleaner emptied:
it ends nothing.

Pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker_runtime.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchHeader,
    InvalidRecords,
    build_control_batch,
    decode_records,
    read_header,
)

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_CONTROL_BATCH_LIMIT = 1 << 20  # a marker batch is ~80 bytes; nothing legitimate decompresses past this


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    committed: bool
    coordinator_epoch: int


def parse_marker(batch: bytes | bytearray | memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """The end-transaction marker of a control batch (`header` read from `batch` at `header.position`); None for
    an emptied batch or a control record of another type (Kafka ignores those)."""
    if header.record_count <= 0:
        return None
    try:
        records = decode_records(batch, header, _CONTROL_BATCH_LIMIT)
    except InvalidRecords:
        return None
    if not records or records[0].key is None or len(records[0].key) < _KEY.size:
        return None
    _, control_type = _KEY.unpack_from(records[0].key)
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    value = records[0].value
    coordinator_epoch = (
        _VALUE.unpack_from(value)[1] if value is not None and len(value) >= _VALUE.size else -1
    )
    return EndTxnMarker(control_type == CONTROL_COMMIT, coordinator_epoch)


def marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, committed: bool,
                 timestamp_ms: int) -> tuple[bytearray, BatchHeader]:  # fmt: skip
    """The control batch the partition leader appends for a WriteTxnMarkers marker."""
    batch = build_control_batch(
        CONTROL_COMMIT if committed else CONTROL_ABORT, producer_id=producer_id, producer_epoch=producer_epoch,
        coordinator_epoch=coordinator_epoch, timestamp_ms=timestamp_ms,
    )  # fmt: skip
    return batch, read_header(batch)
