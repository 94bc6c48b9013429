"""What validating a produced batch costs per batch and per record: the header path (unpack, CRC), the compiled
record walk (`check_records`), its Python twin, and the walk of a compressed batch (decompression included).

    .venv/bin/python bench/record_walk.py

Batches are shaped as clients build them: keyless records of 100 B and 1 KiB filling 16 KiB (the Java
client's and the benchmark's batch.size) and 1 MB (librdkafka's default batch.size).
"""

from __future__ import annotations

import sys
import timeit

from broker_runtime.protocol import records
from broker_runtime.protocol.compression import CODEC_LZ4, CODEC_ZSTD
from broker_runtime.protocol.records import build_batch, check_records, read_header, validate_produce_batch


def per_call(fn, budget_s: float = 0.3) -> float:
    number = max(1, int(budget_s / max(timeit.timeit(fn, number=1), 1e-7)))
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def row(size: int, batch_bytes: int) -> str:
    recs = [(None, b"x" * size)] * max(1, batch_bytes // (size + 10))
    batch = build_batch(recs)
    header = read_header(batch)
    cells = [
        per_call(lambda: validate_produce_batch(batch, 1 << 30)),
        per_call(lambda: check_records(batch, header)),
        per_call(lambda: records._scan_records_python(batch, 61, len(batch), len(recs), 0, False, 0, -1, 1)),
    ]
    for codec in (CODEC_LZ4, CODEC_ZSTD):
        compressed = build_batch(recs, codec=codec)
        compressed_header = read_header(compressed)
        cells.append(per_call(lambda c=compressed, h=compressed_header: check_records(c, h)))
    label = f"{len(recs)} x {size} B ({len(batch) // 1024} KiB)"
    return f"{label:28} " + " ".join(f"{t * 1e6:8.1f} us {t / len(recs) * 1e9:4.0f}ns" for t in cells)


def main() -> None:
    if not records.record_scan_is_compiled():
        sys.exit("the compiled record walk is not built: run make install")
    print(f"{'batch':28} {'header':>16} {'walk (C)':>16} {'walk (Python)':>16} {'lz4':>16} {'zstd':>16}")
    for size in (100, 1024):
        for batch_bytes in (16384, 1_000_000):
            print(row(size, batch_bytes))
    print("(each cell: per batch, then per record)")


if __name__ == "__main__":
    main()
