"""The log cleaner with transactions: aborted data from `.txnindex` never shadows committed values and is
removed, markers follow Kafka's rules, the cleaned segment carries the `.txnindex` of what it kept, and nothing
at or above the last stable offset is cleaned."""

from __future__ import annotations

from dataclasses import replace

from log_helpers import LOG_DIR
from test_log_cleaner import COMPACT, cleaner_for, contents, open_log, produce

from broker_runtime.clock import ManualClock
from broker_runtime.log.txn_index import AbortedTxn, parse_entries
from broker_runtime.protocol.records import decode_records, iter_headers
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
    for i in range(12):  # the markers land a few segments after the data
        produce(plog, [(b"filler-%d" % (i % 4), b"x" * 60)])
    abort_at = end_txn(plog, A, committed=False)
    end_txn(plog, B, committed=True)
    for i in range(20):  # more segments, then everything written is in rolled segments
        produce(plog, [(b"filler-%d" % (i % 4), b"x" * 60)])
    plog.roll()
    marker_segment = next(s for s in reversed(plog.segments) if s.base_offset <= abort_at)
    assert marker_segment is not plog.segments[0]
    entry = AbortedTxn(A, 2, abort_at, 4)  # B was open when A aborted: the LSO then was B's first offset
    assert plog.aborted_transactions(0, plog.log_end_offset) == [entry]
    # Larger segments from now on: the pass rewrites the data's and the marker's segments into one.
    plog.update_config(replace(COMPACT, segment_bytes=1 << 20))

    assert cleaner_for(
        fs, clock, plog, high_watermark=plog.last_stable_offset(plog.log_end_offset)
    ).clean_now()
    kept = {(k, v) for _, k, v in contents(plog)}
    assert (b"k1", b"base-1") in kept and (b"k2", b"base-2") in kept  # not shadowed by the aborted writes
    assert (b"k3", b"committed-3") in kept
    assert not {v for _, v in kept if v is not None and v.startswith(b"aborted")}
    # The ABORT marker stays this pass (its data was seen in the same cleaned segment), and so does its .txnindex
    # entry, now in the cleaned segment, named by the base of the first segment it replaced.
    data = plog.read(0, 1 << 20, plog.log_end_offset, True)
    assert [h.base_offset for h in iter_headers(data) if h.is_control] == [abort_at, abort_at + 1]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [entry]
    txn_files = [p for p in fs.files if p.name.endswith(".txnindex")]
    assert [p.name for p in txn_files] == ["00000000000000000000.txnindex"]
    assert parse_entries(bytes(fs.files[txn_files[0]].data)) == [entry]
    # ...and the log reopens with it.
    end = plog.log_end_offset
    plog.close()
    reopened = open_log(fs, clock, clean_shutdown=True, recovery_point=end)
    assert reopened.aborted_transactions(0, end) == [entry]


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


def committed_view(plog) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of what a read_committed consumer keeps: data records minus those of the aborted
    transactions the log lists (Kafka's consumer-side filtering)."""
    end = plog.log_end_offset
    aborted = plog.aborted_transactions(plog.log_start_offset, end)
    data = plog.read(plog.log_start_offset, 1 << 30, end, True)
    out = []
    for header in iter_headers(data):
        if header.is_control:
            continue
        if header.is_transactional and any(
            t.producer_id == header.producer_id and t.first_offset <= header.base_offset <= t.last_offset
            for t in aborted
        ):
            continue
        out += [(r.key, r.value) for r in decode_records(data, header)]
    return out


def test_power_cut_at_every_step_of_a_pass_keeps_aborted_data_hidden():
    from test_log_cleaner_crash import CrashingFileSystem, PowerCut

    def prepared():
        fs = CrashingFileSystem()
        fs.mkdir(LOG_DIR)
        clock = ManualClock(start_ms=1_700_000_000_000)
        plog = open_log(fs, clock)
        seq = Seq()
        produce(plog, [(b"k1", b"base-1")])
        seq.txn(plog, A, [(b"k1", b"aborted-1")])
        for i in range(8):
            produce(plog, [(b"filler-%d" % (i % 3), b"x" * 80)])
        end_txn(plog, A, committed=False)  # the marker lands segments after the data
        for i in range(8):
            produce(plog, [(b"filler-%d" % (i % 3), b"y" * 80)])
        plog.roll()
        plog.flush()  # everything durable: only the cleaner's work is at stake
        return fs, clock, plog

    fs, clock, plog = prepared()
    before = committed_view(plog)
    assert (b"k1", b"aborted-1") not in before and (b"k1", b"base-1") in before
    steps = 0
    for step in range(10_000):
        fs, clock, plog = prepared()
        end = plog.log_end_offset
        fs.countdown = step
        try:
            cleaner_for(fs, clock, plog, high_watermark=end).clean_now()
        except PowerCut:
            pass
        else:
            break
        steps += 1
        fs.crash(drop_unsynced_dir_entries=True)
        # Flushed up to the end before the pass: recovery re-reads only the active segment, so the rolled ones'
        # .txnindex files are what the swap left.
        reopened = open_log(fs, clock, recovery_point=end)
        view = committed_view(reopened)
        assert (b"k1", b"aborted-1") not in view, f"aborted data visible after a power cut before step {step}"
        assert (b"k1", b"base-1") in view, f"a committed value lost after a power cut before step {step}"
    assert steps > 10


def test_an_aborted_transaction_split_across_cleaned_segments_loses_its_entry_with_its_data(fs, clock):
    """Kafka's rule, with the transaction state carried across the groups of a pass: the group holding the
    data drops it; the group holding the marker knows the data was seen this pass, so it keeps the marker and
    the .txnindex entry once more. The next pass sees none of the data: the entry goes and the marker waits for
    its delete horizon."""
    plog = open_log(fs, clock)
    seq = Seq()
    produce(plog, [(b"k1", b"base-1")])
    seq.txn(plog, A, [(b"k1", b"aborted-1")])
    for i in range(12):
        produce(plog, [(b"filler-%d" % (i % 4), b"x" * 60)])
    abort_at = end_txn(plog, A, committed=False)
    # A's next transaction: its last data batch (which the cleaner keeps, emptied if need be) is elsewhere.
    seq.txn(plog, A, [(b"k2", b"committed-2")])
    end_txn(plog, A, committed=True)
    for i in range(20):
        produce(plog, [(b"filler-%d" % (i % 4), b"x" * 60)])
    plog.roll()
    assert plog.segments[plog._segment_index(abort_at)] is not plog.segments[0]
    cleaner_for(fs, clock, plog, high_watermark=plog.log_end_offset).clean_now()
    assert (1, b"k1", b"aborted-1") not in contents(plog)
    assert (0, b"k1", b"base-1") in contents(plog)
    assert [
        (t.producer_id, t.first_offset, t.last_offset) for t in plog.aborted_transactions(0, abort_at + 1)
    ] == [(A, 1, abort_at)]
    assert abort_at in control_offsets(plog)
    for i in range(20):  # new dirty records: the next pass re-cleans the log from its start
        produce(plog, [(b"filler-%d" % (i % 4), b"y" * 60)])
    plog.roll()
    cleaner_for(fs, clock, plog, high_watermark=plog.log_end_offset).clean_now()
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    assert abort_at in control_offsets(plog)  # until its horizon


def control_offsets(plog) -> list[int]:
    data = plog.read(plog.log_start_offset, 1 << 30, plog.log_end_offset, True)
    return [h.base_offset for h in iter_headers(data) if h.is_control]


def test_a_commit_marker_stays_while_its_data_does_when_they_are_cleaned_in_different_groups(fs, clock):
    """Kafka carries the transaction state of a pass across its groups of segments (LogCleaner.doClean builds
    one CleanedTransactionMetadata per pass): a COMMIT marker cleaned in a later group than its data saw the
    data in the same pass and stays, however old. Dropping it would leave the data as a transaction that never
    ends for whoever rebuilds producer state from the log (a new replica, a restart without snapshots): its last
    stable offset would stay there for good."""
    plog = open_log(fs, clock)
    seq = Seq()
    first, _ = seq.txn(plog, A, [(b"kept-1", b"committed-1")])
    for i in range(24):  # unique keys: the segments between stay full, so data and marker stay apart
        produce(plog, [(b"between-%d" % i, b"x" * 60)])
    commit_at = end_txn(plog, A, committed=True)
    for i in range(20):
        produce(plog, [(b"filler-%d" % (i % 4), b"x" * 60)])
    plog.roll()
    assert plog._segment_index(commit_at) != plog._segment_index(first)
    for n in range(2):  # a second pass after the delete horizon any marker could have been given
        assert cleaner_for(fs, clock, plog, high_watermark=plog.log_end_offset).clean_now()
        clock.advance(plog.config.delete_retention_ms + 1)
        for i in range(20):  # new dirty records: the next pass re-cleans the log from its start
            produce(plog, [(b"filler-%d" % (i % 4), b"y%d" % n * 30)])
        plog.roll()
    assert (first, b"kept-1", b"committed-1") in contents(plog)
    assert commit_at in control_offsets(plog)
    # Producer state rebuilt from the log alone finds the transaction ended.
    end = plog.log_end_offset
    plog.close()
    for path in [p for p in fs.files if p.name.endswith(".snapshot")]:
        fs.unlink(path)
    reopened = open_log(fs, clock, clean_shutdown=True, recovery_point=end)
    assert reopened.last_stable_offset(end) == end
