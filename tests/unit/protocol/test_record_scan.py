"""The compiled record walk (_recordscan.c) and its Python twin: built, and in agreement on any bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.protocol import records
from broker_runtime.protocol.records import record_scan_is_compiled
from tests.unit.protocol.test_record_walk import NOW, record


def test_the_compiled_walk_is_built() -> None:
    assert record_scan_is_compiled(), "broker_runtime/protocol/_recordscan.c is not built: run make install"


def _both(data: bytes, count: int, keys: bool, lo: int, hi: int):
    outcomes = []
    for scan in (records._scan_records_compiled, records._scan_records_python):
        try:
            outcomes.append(scan(data, 0, len(data), count, 3, keys, NOW, lo, hi))
        except ValueError as exc:
            outcomes.append(("error", str(exc).split(":")[0]))
    return outcomes


records_strategy = st.lists(
    st.tuples(
        st.integers(-(2**40), 2**40), st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=300)
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    recs=records_strategy,
    flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 4000),
    count=st.integers(0, 10),
    keys=st.booleans(),
)
def test_compiled_and_python_walks_agree(recs, flips, cut, count, keys) -> None:
    data = bytearray(b"".join(record(ts, k, v) for ts, k, v in recs))
    for pos, byte in flips:
        if pos < len(data):
            data[pos] = byte
    data = bytes(data[: cut if cut < len(data) else len(data)])
    compiled, python = _both(data, count, keys, NOW - 2**39, NOW + 2**39)
    assert compiled == python


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 10))
def test_compiled_and_python_walks_agree_on_noise(data: bytes, count: int) -> None:
    compiled, python = _both(data, count, True, NOW, NOW)
    assert compiled == python


def test_walk_result_shape() -> None:
    body = record(key=None) * 2 + record()[:3]
    for scan in (records._scan_records_compiled, records._scan_records_python):
        assert scan(body, 0, len(body), 10, 7, True, 0, -1, 1) == (
            2,
            2 * len(record(key=None)),
            len(record()),
            [7, 8],
            [],
        )
        assert scan(body, 0, len(body), 1, 0, False, 0, 1, 1) == (1, len(record(key=None)), 0, [], [0])
