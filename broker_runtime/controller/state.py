"""Partition and replica states of the controller: every legal transition in one table (Kafka's
PartitionStateMachine / ReplicaStateMachine `validPreviousStates`).

Partition:   NonExistent -> New -> Online <-> Offline -> NonExistent
             New: replicas assigned, no leader yet. Online: a leader was elected. Offline: the leader died.
Replica:     NonExistent -> New -> Online <-> Offline -> DeletionStarted -> DeletionSuccessful -> NonExistent
                                               Offline/DeletionStarted -> DeletionIneligible -> Online/Offline
"""

from __future__ import annotations

import enum


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


class ReplicaState(enum.Enum):
    NON_EXISTENT = "NonExistentReplica"
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"


P, R = PartitionState, ReplicaState

PARTITION_VALID_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    P.NEW: frozenset({P.NON_EXISTENT}),
    P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.NON_EXISTENT: frozenset({P.OFFLINE}),
}

REPLICA_VALID_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.DELETION_STARTED: frozenset({R.OFFLINE}),
    R.DELETION_SUCCESSFUL: frozenset({R.DELETION_STARTED}),
    R.DELETION_INELIGIBLE: frozenset({R.OFFLINE, R.DELETION_STARTED}),
    R.NON_EXISTENT: frozenset({R.DELETION_SUCCESSFUL}),
}


class IllegalTransition(Exception):
    pass


def valid_partition_transition(old: PartitionState, new: PartitionState) -> bool:
    return old in PARTITION_VALID_PREVIOUS[new]


def valid_replica_transition(old: ReplicaState, new: ReplicaState) -> bool:
    return old in REPLICA_VALID_PREVIOUS[new]
