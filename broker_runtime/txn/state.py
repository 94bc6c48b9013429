"""The transaction state machine: every legal move between transaction states, as one table.

Theory of operation
-------------------
A transactional id's state lives in `__transaction_state`; the coordinator shard (`coordinator.py`) decides
*when* to move and calls `transition()` and nothing else to check *whether* it may.

- **Empty**: the producer has an id and epoch, no transaction is open. -> Ongoing on AddPartitionsToTxn or
  AddOffsetsToTxn; -> Empty again on InitProducerId (epoch bump); -> Dead when the id expires.
- **Ongoing**: partitions were added. -> Ongoing as more are added; -> PrepareCommit / PrepareAbort on EndTxn;
  -> PrepareEpochFence when a new producer with the same id (InitProducerId) or the timeout fences it.
- **PrepareCommit / PrepareAbort**: the decision is in the log; markers are being written to every partition of
  the transaction. A coordinator that loads a partition finishes these. -> CompleteCommit / CompleteAbort once
  every marker is written.
- **CompleteCommit / CompleteAbort**: done; the next AddPartitionsToTxn starts a new transaction (-> Ongoing),
  InitProducerId bumps the epoch (-> Empty), expiry removes the id (-> Dead).
- **PrepareEpochFence**: in memory only, never written: the epoch is bumped and the open transaction is about
  to be aborted (-> PrepareAbort, which is what the log gets).
- **Dead**: the id is expiring; its tombstone is being written.

The table is Kafka's `validPreviousStates` (core/src/main/scala/kafka/coordinator/transaction/
TransactionMetadata.scala); the ids are those `__transaction_state` stores and the names those
DescribeTransactions and ListTransactions report.
"""

from __future__ import annotations

import enum


class TransactionState(enum.Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def display_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState | None:
        return _BY_ID.get(state_id)

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state named `name` exactly as Kafka names it (ListTransactions filters are case-sensitive)."""
        return _BY_NAME.get(name)


_BY_ID = {state.id: state for state in TransactionState}
_BY_NAME = {state.display_name: state for state in TransactionState}

S = TransactionState

VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

# States whose transactional id may expire after transactional.id.expiration.ms without activity.
EXPIRATION_ALLOWED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransactionTransition(RuntimeError):
    """A bug: the coordinator tried a move the table forbids. Never caused by client input."""


def can_transition(current: TransactionState, target: TransactionState) -> bool:
    return current in VALID_PREVIOUS[target]


def transition(
    transactional_id: str, current: TransactionState, target: TransactionState
) -> TransactionState:
    """Return `target` if the move from `current` is legal, else raise IllegalTransactionTransition."""
    if current not in VALID_PREVIOUS[target]:
        allowed = ", ".join(sorted(s.display_name for s in VALID_PREVIOUS[target]))
        raise IllegalTransactionTransition(
            f"transactional id {transactional_id!r} must be in one of [{allowed}] to move to "
            f"{target.display_name}; it is {current.display_name}"
        )
    return target
