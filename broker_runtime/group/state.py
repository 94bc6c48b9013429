"""The classic group state machine: every legal move between group states, as one table.

Theory of operation
-------------------
A classic (JoinGroup/SyncGroup) group moves through five states. Everything that decides *whether* a group may
move lives here; everything that decides *when* it moves lives in `coordinator.py`, which calls `transition()`
and nothing else to change a group's state.

- **Empty**: no members. The group may still own committed offsets (a consumer that assigns partitions by hand
  commits with generation -1 into an Empty group). Joins are accepted; SyncGroup, Heartbeat and member
  OffsetCommits get UNKNOWN_MEMBER_ID. Offsets expire `offsets.retention.minutes` after the group became Empty.
  -> PreparingRebalance when a member joins (after `group.initial.rebalance.delay.ms`), -> Dead when its last
  offset is gone, when DeleteGroups removes it, or when its `__consumer_offsets` partition is unloaded.
- **PreparingRebalance**: JoinGroup requests are parked until every known member has rejoined or the rebalance
  timeout passes. Heartbeats answer REBALANCE_IN_PROGRESS so members rejoin; commits of the previous generation
  are still accepted. -> CompletingRebalance when the join phase completes with members, -> Empty when it
  completes with none, -> Dead on unload.
- **CompletingRebalance**: the new generation exists; the leader computes the assignment and sends it in its
  SyncGroup; followers' SyncGroups are parked. Commits answer REBALANCE_IN_PROGRESS.
  -> Stable once the assignment is written to `__consumer_offsets`, -> PreparingRebalance when membership or
  metadata changes first, -> Dead on unload.
- **Stable**: members heartbeat and commit. -> PreparingRebalance when a member joins, leaves, changes its
  metadata, fails its session, or the leader rejoins; -> Dead on unload.
- **Dead**: final. The group object is being dropped; requests racing with that get COORDINATOR_NOT_AVAILABLE
  and retry against the (possibly new) coordinator.

The table is Kafka's `validPreviousStates` (core/src/main/scala/kafka/coordinator/group/GroupMetadata.scala).
"""

from __future__ import annotations

import enum


class GroupState(enum.Enum):
    # The values are the names Kafka reports in DescribeGroups and ListGroups and accepts in the
    # ListGroups states filter (case-insensitively).
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, name: str) -> GroupState | None:
        """The state named `name`, ignoring case (ListGroups filters are case-insensitive); None if unknown."""
        return _BY_LOWER_NAME.get(name.lower())


_BY_LOWER_NAME = {state.value.lower(): state for state in GroupState}


VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    # Dead may follow anything, itself included: unloading a partition kills groups in any state, and a
    # group deleted by DeleteGroups may be unloaded again before it is dropped.
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalGroupTransition(RuntimeError):
    """A bug: the coordinator tried a move the table forbids. Never caused by client input."""


def can_transition(current: GroupState, target: GroupState) -> bool:
    return current in VALID_PREVIOUS[target]


def transition(group_id: str, current: GroupState, target: GroupState) -> GroupState:
    """Return `target` if the move from `current` is legal, else raise IllegalGroupTransition."""
    if current not in VALID_PREVIOUS[target]:
        allowed = ", ".join(sorted(s.value for s in VALID_PREVIOUS[target]))
        raise IllegalGroupTransition(
            f"group {group_id!r} must be in one of [{allowed}] to move to {target.value}; it is {current.value}"
        )
    return target
