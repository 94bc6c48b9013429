"""Leader election, pure: given a partition's assignment, ISR and which replicas are alive, who leads next
(Kafka's PartitionLeaderElectionAlgorithms and Election). Nothing here reads ZooKeeper or the clock."""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from broker_runtime.cluster.zk_paths import LeaderAndIsr


class Strategy(enum.Enum):
    OFFLINE = "offline"  # the leader died (or the partition had none)
    REASSIGN = "reassign"  # the leader is not in the reassignment's target replicas
    PREFERRED = "preferred"  # move leadership back to the first replica
    CONTROLLED_SHUTDOWN = "controlled_shutdown"  # the leader is shutting down


@dataclass(frozen=True)
class ElectionResult:
    leader_and_isr: LeaderAndIsr | None  # None: no eligible leader
    recipients: tuple[int, ...]  # replicas to send LeaderAndIsr to


def offline_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int], unclean: bool
) -> int | None:
    """The first live ISR replica in assignment order; a live out-of-ISR replica only when unclean."""
    for replica in assignment:
        if replica in live and replica in isr:
            return replica
    if unclean:
        for replica in assignment:
            if replica in live:
                return replica
    return None


def elect_offline(
    current: LeaderAndIsr, assignment: Sequence[int], live: Collection[int], unclean: bool
) -> ElectionResult:
    live_replicas = tuple(r for r in assignment if r in live)
    leader = offline_leader(assignment, current.isr, live, unclean)
    if leader is None:
        return ElectionResult(None, live_replicas)
    if leader in current.isr:
        new = current.with_leader(leader, [r for r in current.isr if r in live])
    else:
        # Unclean: the new leader's log may lack acknowledged records; it alone is in sync, and it is
        # marked recovering (KIP-704) until it has fenced the others.
        new = current.with_leader(leader, [leader])
        new = LeaderAndIsr(
            new.leader, new.leader_epoch, new.isr, new.controller_epoch, new.partition_epoch, 1
        )
    return ElectionResult(new, live_replicas)


def elect_for_reassignment(
    current: LeaderAndIsr, target_replicas: Sequence[int], live: Collection[int]
) -> ElectionResult:
    leader = next((r for r in target_replicas if r in live and r in current.isr), None)
    return ElectionResult(None if leader is None else current.with_leader(leader), tuple(target_replicas))


def elect_preferred(
    current: LeaderAndIsr, assignment: Sequence[int], live: Collection[int]
) -> ElectionResult:
    preferred = assignment[0] if assignment else None
    ok = preferred is not None and preferred in live and preferred in current.isr
    return ElectionResult(current.with_leader(preferred) if ok else None, tuple(assignment))


def elect_for_controlled_shutdown(
    current: LeaderAndIsr, assignment: Sequence[int], live_or_shutting_down: Collection[int],
    shutting_down: Collection[int],
) -> ElectionResult:  # fmt: skip
    live = tuple(r for r in assignment if r in live_or_shutting_down)
    leader = next(
        (r for r in assignment if r in live_or_shutting_down and r in current.isr and r not in shutting_down),
        None,
    )
    if leader is None:
        return ElectionResult(None, live)
    return ElectionResult(
        current.with_leader(leader, [r for r in current.isr if r not in shutting_down]), live
    )
