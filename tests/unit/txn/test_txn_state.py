"""The transaction state table: Kafka's validPreviousStates, every other move raises."""

from __future__ import annotations

import itertools

import pytest

from broker_runtime.txn.state import (
    IllegalTransactionTransition,
    TransactionState,
    can_transition,
    transition,
)

S = TransactionState

LEGAL = {
    (S.EMPTY, S.EMPTY), (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING), (S.EMPTY, S.ONGOING), (S.COMPLETE_COMMIT, S.ONGOING), (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD), (S.COMPLETE_ABORT, S.DEAD), (S.COMPLETE_COMMIT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}  # fmt: skip


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_transition_follows_kafkas_table(current: TransactionState, target: TransactionState) -> None:
    if (current, target) in LEGAL:
        assert transition("t", current, target) is target
        assert can_transition(current, target)
    else:
        assert not can_transition(current, target)
        with pytest.raises(IllegalTransactionTransition, match=f"to move to {target.display_name}"):
            transition("t", current, target)


def test_ids_and_names_are_kafkas() -> None:
    assert [(s.id, s.display_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence"),
    ]  # fmt: skip
    assert S.from_id(4) is S.COMPLETE_COMMIT and S.from_id(8) is None
    assert S.from_name("Ongoing") is S.ONGOING and S.from_name("ongoing") is None
