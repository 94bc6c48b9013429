"""The group state table: every legal move is allowed, every other one raises."""

from __future__ import annotations

import itertools

import pytest

from broker_runtime.group.state import (
    VALID_PREVIOUS,
    GroupState,
    IllegalGroupTransition,
    can_transition,
    transition,
)

S = GroupState

LEGAL = {
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.COMPLETING_REBALANCE, S.STABLE),
    *((state, S.DEAD) for state in S),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_transition_follows_kafkas_table(current: GroupState, target: GroupState) -> None:
    if (current, target) in LEGAL:
        assert transition("g", current, target) is target
        assert can_transition(current, target)
    else:
        assert not can_transition(current, target)
        with pytest.raises(IllegalGroupTransition, match=f"to move to {target.value}"):
            transition("g", current, target)


def test_every_state_has_an_entry() -> None:
    assert set(VALID_PREVIOUS) == set(S)


def test_state_names_are_kafkas_and_parse_ignores_case() -> None:
    assert [s.value for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert GroupState.parse("stable") is S.STABLE
    assert GroupState.parse("PREPARINGREBALANCE") is S.PREPARING_REBALANCE
    assert GroupState.parse("Assigning") is None
