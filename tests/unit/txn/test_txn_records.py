"""`__transaction_state` records: golden bytes built by hand from Kafka's TransactionLog{Key,Value}.json."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_runtime.txn.records import (
    RecordFormatError,
    TransactionKey,
    TransactionValue,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    transaction_partition,
)
from broker_runtime.txn.state import TransactionState

S = TransactionState


def test_key_golden_bytes() -> None:
    expected = bytes.fromhex(
        "0000"  # key version 0
        "0003" "747831"  # transactionalId "tx1"
    )  # fmt: skip
    assert encode_key("tx1") == expected
    assert decode_key(expected) == TransactionKey("tx1")


def test_unknown_key_versions_are_reported_not_parsed() -> None:
    assert decode_key(bytes.fromhex("0001ffff")) == UnknownKey(1)


ONGOING = TransactionValue(
    producer_id=1000,
    producer_epoch=3,
    timeout_ms=60000,
    state=S.ONGOING,
    partitions=(("a", 0), ("a", 2), ("b", 1)),
    last_update_ms=1_700_000_000_500,
    start_ms=1_700_000_000_000,
)

ONGOING_V0 = bytes.fromhex(
    "0000"  # value version 0
    "00000000000003e8"  # producerId 1000
    "0003"  # producerEpoch 3
    "0000ea60"  # transactionTimeoutMs 60000
    "01"  # transactionStatus 1 = Ongoing
    "00000002"  # 2 topics
    "0001" "61"  # topic "a"
    "00000002" "00000000" "00000002"  # partitions [0, 2]
    "0001" "62"  # topic "b"
    "00000001" "00000001"  # partitions [1]
    "0000018bcfe569f4"  # transactionLastUpdateTimestampMs
    "0000018bcfe56800"  # transactionStartTimestampMs
)  # fmt: skip

ONGOING_V1 = bytes.fromhex(
    "0001"  # value version 1 (flexible)
    "00000000000003e8"  # producerId 1000
    "0003"  # producerEpoch 3
    "0000ea60"  # transactionTimeoutMs 60000
    "01"  # Ongoing
    "03"  # compact array: 2 topics
    "02" "61"  # compact string "a"
    "03" "00000000" "00000002"  # compact array [0, 2]
    "00"  # topic's tagged fields
    "02" "62"  # "b"
    "02" "00000001"  # [1]
    "00"
    "0000018bcfe569f4"
    "0000018bcfe56800"
    "00"  # tagged fields
)  # fmt: skip


def test_value_v0_golden_bytes() -> None:
    assert encode_value(ONGOING) == ONGOING_V0
    assert decode_value(ONGOING_V0) == ONGOING


def test_value_v1_golden_bytes_are_read_and_written() -> None:
    assert encode_value(ONGOING, version=1) == ONGOING_V1
    assert decode_value(ONGOING_V1) == ONGOING


def test_empty_transactions_write_null_partitions() -> None:
    empty = TransactionValue(7, 0, 60000, S.EMPTY, (), 5, -1)
    data = encode_value(empty)
    # version, producer id, epoch, timeout, status 0, then a null array (-1), then the two timestamps
    assert data[2 + 8 + 2 + 4 : 2 + 8 + 2 + 4 + 1 + 4] == bytes.fromhex("00ffffffff")
    assert decode_value(data) == empty


def test_empty_transaction_with_partitions_is_refused() -> None:
    with pytest.raises(RecordFormatError, match="Empty"):
        encode_value(TransactionValue(7, 0, 60000, S.EMPTY, (("a", 0),), 5, -1))


def test_tagged_fields_of_newer_writers_are_skipped() -> None:
    # Kafka 4.0 adds tagged fields (previous/next producer ids) to version 1; a reader of 3.9 skips them.
    with_tags = ONGOING_V1[:-1] + bytes.fromhex("01000800000000000003e7")
    assert decode_value(with_tags) == ONGOING


@pytest.mark.parametrize(
    "data",
    [
        b"",
        bytes.fromhex("0002") + ONGOING_V0[2:],  # unknown version
        ONGOING_V0[:-3],  # truncated
        ONGOING_V0[:18] + b"\x09" + ONGOING_V0[19:],  # unknown status 9
    ],
)
def test_bad_values_raise_record_format_error(data: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_value(data)


@given(
    producer_id=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 32767),
    timeout=st.integers(1, 2**31 - 1),
    state=st.sampled_from([s for s in S if s is not S.EMPTY]),
    partitions=st.sets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=10),
    version=st.sampled_from([0, 1]),
)
def test_values_round_trip(producer_id, epoch, timeout, state, partitions, version) -> None:
    value = TransactionValue(producer_id, epoch, timeout, state, tuple(sorted(partitions)), 1, 2)
    assert decode_value(encode_value(value, version)) == value


@given(st.binary(max_size=80))
def test_decoding_garbage_raises_only_record_format_error(data: bytes) -> None:
    for decode in (decode_key, decode_value):
        try:
            decode(data)
        except RecordFormatError:
            pass


def test_partitioning_is_kafkas() -> None:
    # Utils.abs("tx1".hashCode) % 50: "tx1".hashCode = 115245
    assert transaction_partition("tx1", 50) == 115245 % 50
    # Ids spread over every partition.
    assert {transaction_partition(f"t{i}", 7) for i in range(200)} == set(range(7))
