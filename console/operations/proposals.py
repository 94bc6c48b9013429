"""What each kind of operation is asked for, checked and turned into a plan before anyone approves it.

`propose(cluster, kind, request)` returns the operation's params: for the kinds that move replicas
(reassignment, replication_factor, failover, decommission) the plan in kafka-reassign-partitions JSON and its
summary (replicas before and after, bytes to copy); for a preferred leader election the partitions chosen.
Nothing here changes the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from console.clusters.client import ClusterClient, client_for
from console.clusters.models import Cluster, ManagedBroker
from console.errors import ConsoleError, Invalid
from console.operations import planning

MOVING_KINDS = ("reassignment", "replication_factor", "failover", "decommission")


def cluster_state(client: ClusterClient) -> tuple[dict, dict[int, str | None], dict]:
    """(assignment {(topic, partition): replicas}, live brokers {id: rack}, sizes {(topic, partition): bytes})."""
    md = client.metadata(max_age_s=0)
    assignment = {(p.topic, p.partition): list(p.replicas) for p in md.partitions()}
    _, _, brokers = client.describe_cluster()
    try:
        _, sizes = client.log_dir_sizes()
    except ConsoleError:
        sizes = {}  # sizes only guide the choice of what to move
    return assignment, {b.id: b.rack for b in brokers}, sizes


def offline_partitions(client: ClusterClient, live: Iterable[int]) -> set[tuple[str, int]]:
    """Partitions without a live in-sync replica (without a leader, or about to lose it to a dead broker): a new
    replica would have nothing to copy from and a reassignment of them could never finish. From the metadata
    `cluster_state` just fetched."""
    alive = set(live)
    return {(p.topic, p.partition) for p in client.metadata().partitions() if not set(p.isr) & alive}


def _names(partitions) -> list[str]:
    return [f"{t}-{p}" for t, p in sorted(partitions)]


def _int(request: dict, key: str, *, minimum: int = 0) -> int:
    value = request.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise Invalid(f"{key} must be an integer of at least {minimum}", field=key)
    return value


def _throttle(request: dict) -> int | None:
    if request.get("throttle_bytes_per_s") in (None, ""):
        return None
    return _int(request, "throttle_bytes_per_s", minimum=1)


def propose(cluster: Cluster, kind: str, request: dict[str, Any]) -> dict[str, Any]:
    client = client_for(cluster)
    if kind == "preferred_leader_election":
        return _election(client, request)
    if kind not in MOVING_KINDS:
        raise Invalid(f"unknown operation kind {kind!r}", field="kind")
    assignment, racks, sizes = cluster_state(client)
    offline = offline_partitions(client, racks)
    params: dict[str, Any] = {"throttle_bytes_per_s": _throttle(request)}
    try:
        if kind == "reassignment":
            if request.get("plan") is not None:
                targets = planning.from_json(request["plan"])
                planning.check_against(targets, assignment, racks)
                stuck = {
                    tp for tp, replicas in targets.items() if tp in offline and replicas != assignment[tp]
                }
                if stuck:
                    raise Invalid(
                        f"{', '.join(_names(stuck))}: no leader (no live in-sync replica), so a new replica would "
                        "have nothing to copy from; bring its brokers back first",
                        field="plan",
                    )
                params["source"] = "given"
            else:
                topics = request.get("topics") or None
                scope = [tp for tp in assignment if (topics is None or tp[0] in topics) and tp not in offline]
                targets = planning.plan(assignment, racks, sizes, scope=scope, rebalance=True)
                if not targets:
                    raise Invalid("the cluster is balanced: the proposal moves nothing", field="plan")
                params["source"] = "balanced proposal"
        elif kind == "replication_factor":
            topic, rf = request.get("topic"), _int(request, "replication_factor", minimum=1)
            scope = [tp for tp in assignment if tp[0] == topic]
            if not scope:
                raise Invalid(f"topic {topic!r} does not exist", field="topic")
            if offline & set(scope):
                raise Invalid(
                    f"{', '.join(_names(offline & set(scope)))}: no leader (no live in-sync replica); bring its "
                    "brokers back before changing the replication factor",
                    field="topic",
                )
            targets = planning.plan(
                assignment, racks, sizes, scope=scope, replication_factor=dict.fromkeys(scope, rf)
            )
            if not targets:
                raise Invalid(f"{topic} already has replication factor {rf}", field="replication_factor")
            params.update(topic=topic, replication_factor=rf)
        else:  # failover, decommission: every replica of the broker goes elsewhere
            broker = _int(request, "broker")
            known = set(racks) | {b for rs in assignment.values() for b in rs}
            known |= set(
                ManagedBroker.objects.filter(cluster=cluster, decommissioned=False).values_list(
                    "broker_id", flat=True
                )
            )
            if broker not in known:
                raise Invalid(f"broker {broker} is not in cluster {cluster.name}", field="broker")
            if kind == "failover" and broker in racks:
                raise Invalid(
                    f"broker {broker} is alive: decommission it to move its replicas away", field="broker"
                )
            scope = [tp for tp, rs in assignment.items() if broker in rs]
            if kind == "failover":
                # Restore what can be restored. A partition wider than the live brokers waits; one whose every
                # in-sync replica was on the dead broker has no leader and nothing to copy from: it is lost
                # until the broker returns, and moving it would never finish.
                eligible = len(set(racks) - {broker})
                params["not_restorable"] = [
                    f"{t}-{p}" for t, p in sorted(scope) if len(assignment[(t, p)]) > eligible
                ]
                params["offline"] = _names(offline & set(scope))
                scope = [tp for tp in scope if len(assignment[tp]) <= eligible and tp not in offline]
            else:
                _check_room_to_decommission(broker, scope, assignment, racks)
            targets = planning.plan(assignment, racks, sizes, scope=scope, exclude=[broker])
            params["broker"] = broker
    except planning.PlanError as exc:
        raise Invalid(str(exc), field="plan") from exc
    params["plan"] = planning.to_json(targets)
    params["summary"] = planning.summary(targets, assignment, sizes)
    return params


def _check_room_to_decommission(
    broker: int, scope: list[tuple[str, int]], assignment: dict, racks: dict[int, str | None]
) -> None:
    """A decommission never lowers a replication factor: every partition on the broker needs as many other
    live brokers as it has replicas. Refused up front, naming the topics, rather than failing half-way."""
    others = len(set(racks) - {broker})
    too_wide: dict[str, int] = {}
    for topic, partition in scope:
        rf = len(assignment[(topic, partition)])
        if rf > others:
            too_wide[topic] = max(rf, too_wide.get(topic, 0))
    if too_wide:
        listing = ", ".join(f"{t} (replication factor {rf})" for t, rf in sorted(too_wide.items()))
        raise Invalid(
            f"broker {broker} cannot be decommissioned: {listing} would need more than the "
            f"{others} other live brokers; add a broker first or lower the replication factor",
            field="broker",
        )


def _election(client: ClusterClient, request: dict) -> dict[str, Any]:
    md = client.metadata(max_age_s=0)
    existing = {(p.topic, p.partition): p for p in md.partitions()}
    chosen = request.get("partitions")
    if chosen is None:
        partitions = None
        candidates = list(existing.values())
    else:
        if not isinstance(chosen, list) or not chosen:
            raise Invalid("partitions must be a non-empty list of {topic, partition}", field="partitions")
        partitions = []
        for entry in chosen:
            key = (entry.get("topic"), entry.get("partition")) if isinstance(entry, dict) else None
            if key not in existing:
                raise Invalid(f"no such partition: {entry!r}", field="partitions")
            partitions.append(list(key))
        candidates = [existing[tuple(k)] for k in partitions]
    not_preferred = [
        {"topic": p.topic, "partition": p.partition, "leader": p.leader, "preferred": p.replicas[0]}
        for p in candidates
        if p.replicas and p.leader != p.replicas[0]
    ]
    return {
        "partitions": partitions,
        "summary": {"partitions": not_preferred, "leaders_to_move": len(not_preferred)},
    }
