"""Theory of operation: every long control-plane operation is a persisted state machine.

    proposed ──▶ approved ──▶ running ──▶ done
        │            │           ├──────▶ failed
        └────────────┴───────────┴──────▶ cancelled

An operation is *proposed* with its parameters (and, for reassignments, a plan to review), *approved* by an
operator (operations that need no review, such as creating a topic, are created approved), picked up by a
Celery worker (*running*), and ends *done*, *failed* or *cancelled*. Every transition goes through
`Operation.transition`, which applies this table as a compare-and-set on the row, so two workers (or a worker
and a cancelling user) can never both move the same operation. A worker that dies leaves the operation
*running*; the task is re-delivered (late acks) and resumes from the steps already recorded.

This module owns every transition; nothing else assigns `Operation.state`.
"""

from __future__ import annotations

import enum


class State(enum.StrEnum):
    PROPOSED = "proposed"
    APPROVED = "approved"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: The states each state may be entered from.
VALID_PREVIOUS: dict[State, frozenset[State]] = {
    State.PROPOSED: frozenset(),
    State.APPROVED: frozenset({State.PROPOSED}),
    State.RUNNING: frozenset({State.APPROVED}),
    State.DONE: frozenset({State.RUNNING}),
    State.FAILED: frozenset({State.PROPOSED, State.APPROVED, State.RUNNING}),
    State.CANCELLED: frozenset({State.PROPOSED, State.APPROVED, State.RUNNING}),
}

FINAL: frozenset[State] = frozenset({State.DONE, State.FAILED, State.CANCELLED})


class IllegalTransition(Exception):
    def __init__(self, current: str, new: State) -> None:
        super().__init__(f"an operation that is {current} cannot become {new}")
        self.current = current
        self.new = new


def check(current: State, new: State) -> None:
    if current not in VALID_PREVIOUS[new]:
        raise IllegalTransition(current, new)
