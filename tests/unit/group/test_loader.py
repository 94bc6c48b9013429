"""The loader's fast record walk reads exactly what the general record decoder reads."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.coordinator.runtime import iter_key_values
from broker_runtime.protocol.compression import CODEC_GZIP, CODEC_NONE
from broker_runtime.protocol.records import build_batch, decode_records, read_header

field = st.none() | st.binary(max_size=300)  # long enough for multi-byte varint lengths


@settings(max_examples=200)
@given(
    records=st.lists(st.tuples(field, field), min_size=1, max_size=40),
    base_offset=st.integers(0, 2**40),
    codec=st.sampled_from([CODEC_NONE, CODEC_GZIP]),
    prefix=st.binary(max_size=20),
)
def test_iter_key_values_matches_decode_records(records, base_offset, codec, prefix) -> None:
    batch = build_batch(records, base_offset=base_offset, codec=codec)
    data = prefix + bytes(batch)  # the batch does not start at the beginning of the buffer
    header = read_header(data, len(prefix))
    expected = [(r.offset, r.key, r.value) for r in decode_records(data, header)]
    assert list(iter_key_values(data, header)) == expected
    assert [(o, k, v) for o, k, v in expected] == [
        (base_offset + i, k, v) for i, (k, v) in enumerate(records)
    ]
