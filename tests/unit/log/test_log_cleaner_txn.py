"""The log cleaner with transactions: aborted data from `.txnindex` never shadows committed values and is
removed, markers follow Kafka's rules, the cleaned segment carries the `.txnindex` of what it kept, and nothing
at or above the last stable offset is cleaned."""

from __future__ import annotations

from test_log_cleaner import COMPACT, cleaner_for, contents, open_log, produce

from broker_runtime.log.txn_index import AbortedTxn, parse_entries
from broker_runtime.protocol.records import iter_headers
from broker_runtime.txn.control import marker_batch

A, B, P = 1000, 2000, 3000  # transactional producers A and B, idempotent producer P


def end_txn(plog, pid, *, committed: bool) -> int:
    batch, header = marker_batch(pid, 0, 0, committed, plog.clock.time_ms())
    return plog.append_as_leader(batch, header, 0, plog.clock.time_ms()).base_offset


class Seq:
    def __init__(self) -> None:
        self.next: dict[int, int] = {}

    def txn(self, plog, pid, records):
        seq = self.next.get(pid, 0)
        self.next[pid] = seq + len(records)
        return produce(
            plog, records, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
        )


def test_aborted_values_never_shadow_committed_ones_and_are_removed(fs, clock):
    plog = open_log(fs, clock)
    seq = Seq()
    produce(plog, [(b"k1", b"base-1"), (b"k2", b"base-2")])  # 0-1
    seq.txn(plog, A, [(b"k1", b"aborted-1"), (b"k2", b"aborted-2")])  # 2-3
    seq.txn(plog, B, [(b"k3", b"committed-3")])  # 4
    end_txn(plog, A, committed=False)  # 5
    end_txn(plog, B, committed=True)  # 6
    for i in range(20):  # more segments, then everything written is in rolled segments
        produce(plog, [(b"filler-%d" % (i % 4), b"x" * 60)])
    plog.roll()
    assert plog.aborted_transactions(0, plog.log_end_offset) == [AbortedTxn(A, 2, 5, 4)]

    assert cleaner_for(
        fs, clock, plog, high_watermark=plog.last_stable_offset(plog.log_end_offset)
    ).clean_now()
    kept = {(k, v) for _, k, v in contents(plog)}
    assert (b"k1", b"base-1") in kept and (b"k2", b"base-2") in kept  # not shadowed by the aborted writes
    assert (b"k3", b"committed-3") in kept
    assert not {v for _, v in kept if v is not None and v.startswith(b"aborted")}
    # The ABORT marker stays this pass (its data was seen), and so does its .txnindex entry, now in the cleaned
    # segment that holds the marker.
    data = plog.read(0, 1 << 20, plog.log_end_offset, True)
    assert [h.base_offset for h in iter_headers(data) if h.is_control] == [5, 6]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [AbortedTxn(A, 2, 5, 4)]
    txn_files = [p for p in fs.files if p.name.endswith(".txnindex")]
    assert len(txn_files) == 1
    assert parse_entries(bytes(fs.files[txn_files[0]].data)) == [AbortedTxn(A, 2, 5, 4)]
    # ...and the log reopens with it.
    end = plog.log_end_offset
    plog.close()
    reopened = open_log(fs, clock, clean_shutdown=True, recovery_point=end)
    assert reopened.aborted_transactions(0, end) == [AbortedTxn(A, 2, 5, 4)]


def test_an_open_transaction_bounds_cleaning_at_the_last_stable_offset(fs, clock):
    plog = open_log(fs, clock, COMPACT)
    seq = Seq()
    for i in range(10):
        produce(plog, [(b"k", b"old-%d" % i + b"v" * 60)])
    first_open, _ = seq.txn(plog, A, [(b"k", b"undecided")])
    for i in range(10):
        produce(plog, [(b"k", b"new-%d" % i + b"v" * 60)])
    plog.roll()
    lso = plog.last_stable_offset(plog.log_end_offset)
    assert lso == first_open
    cleaner_for(fs, clock, plog, high_watermark=lso).clean_now()
    after = contents(plog)
    assert (first_open, b"k", b"undecided") in after  # nothing at or above the LSO was touched
    assert all(offset >= first_open - 1 or value.startswith(b"old") for offset, _, value in after)
    assert len([1 for offset, _, _ in after if offset > first_open]) == 10
