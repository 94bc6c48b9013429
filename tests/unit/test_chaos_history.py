"""The fault tests' history checker catches every anomaly it is there for, and passes a clean history."""

from __future__ import annotations

from tests.chaos.history import Commit, Record, check, value_of


def clean_history():
    acked = [Record(p, o, value_of("p1", p * 10 + o)) for p in range(2) for o in range(5)]
    final = list(acked)
    observed = acked[:7] + acked[3:5]  # a redelivery during the run is fine
    commits = [Commit(0, 2, "ack", 0, 1), Commit(0, 2, "read", 2, 3), Commit(0, 5, "ack", 2.5, 4),
               Commit(0, 2, "read", 3.5, 5),  # overlaps the commit of 5: may see either
               Commit(0, 5, "read", 6, 7), Commit(1, 5, "read", 6, 7)]  # fmt: skip
    return acked, observed, final, commits


def problems_of(*history) -> list[str]:
    return [p.split(":")[0] for p in check(*history).problems]


def test_a_clean_history_is_valid() -> None:
    verdict = check(*clean_history())
    assert verdict.valid, verdict.problems
    assert verdict.stats["acked"] == 10


def test_a_lost_acknowledged_record_is_caught() -> None:
    acked, observed, final, commits = clean_history()
    assert problems_of(acked, observed, final[:3] + final[4:], commits) == ["lost"]


def test_a_record_read_twice_is_caught() -> None:
    acked, observed, final, _ = clean_history()
    doubled = [*final, Record(1, 5, final[0].value)]  # a retry appended again after a failover
    assert "duplicate" in problems_of(acked, observed, doubled, [])


def test_an_offset_seen_with_two_values_during_the_run_is_caught() -> None:
    acked, observed, final, commits = clean_history()
    # a consumer read a record at 0@1 that a new leader later replaced (a truncated, then rewritten offset)
    observed = [*observed, Record(0, 1, value_of("p2", 0))]
    assert problems_of(acked, observed, final, commits) == ["offset with two values"]


def test_an_acknowledged_offset_holding_another_value_is_caught() -> None:
    acked, observed, final, commits = clean_history()
    acked = [*acked[:-1], Record(acked[-1].partition, acked[-1].offset - 1, acked[-1].value)]
    assert "offset with two values" in problems_of(acked, observed, final, commits)


def test_records_out_of_their_producers_order_are_caught() -> None:
    _, _, final, commits = clean_history()
    swapped = [Record(0, 0, final[1].value), Record(0, 1, final[0].value), *final[2:]]
    assert problems_of([], [], swapped, commits) == ["order"]


def test_a_committed_offset_going_backwards_is_caught() -> None:
    acked, observed, final, commits = clean_history()
    assert problems_of(acked, observed, final, [*commits, Commit(0, 3, "read", 8, 9)]) == ["commit went back"]
    # a read sent after an acknowledged commit that shows the offset before it
    went_back = [Commit(1, 2, "read", 0, 1), Commit(1, 4, "ack", 1, 2), Commit(1, 2, "read", 3, 4)]
    assert problems_of(acked, observed, final, went_back) == ["commit went back"]


def test_a_commit_past_the_end_of_the_log_is_caught() -> None:
    acked, observed, final, _ = clean_history()
    assert problems_of(acked, observed, final, [Commit(1, 9, "ack")]) == ["commit past the log"]
