"""The operations' Celery tasks: moving replicas (reassignment, replication factor change, failover and
decommission all run a plan), preferred leader election, and the periodic watch that starts failovers.

Every step is idempotent and recorded before the next starts, so a worker resuming an operation skips what is
done: a plan is submitted once ("submitted"); resubmitting the same targets after a crash between the request
and its record would be harmless too, as Kafka takes an identical reassignment as a no-op.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from celery import shared_task
from celery.signals import worker_ready
from django.db import transaction
from django.utils import timezone

from console.audit.models import Outcome
from console.audit.recording import record
from console.clusters.client import ClusterClient, client_for
from console.clusters.models import BrokerState, Cluster, ManagedBroker
from console.errors import ConsoleError
from console.operations import planning, proposals, runner
from console.operations.models import Kind, Operation
from console.operations.states import FINAL, State

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 1.0
#: How long metadata may take to show a finished reassignment's replicas, and a new leader.
SETTLE_TIMEOUT_S = 60.0
#: How long a decommissioned broker may take to stop and leave the cluster.
STOP_TIMEOUT_S = 180.0

THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")

AUDIT_ACTIONS = {
    "reassignment": "operation.approve",
    "replication_factor": "operation.approve",
    "failover": "operation.approve",
    "decommission": "broker.decommission",
    "preferred_leader_election": "operation.approve",
}


def _targets(operation: Operation) -> dict[tuple[str, int], list[int]]:
    return (
        planning.from_json(operation.params["plan"])
        if operation.params.get("plan", {}).get("partitions")
        else {}
    )


def _rows(operation: Operation) -> list[dict]:
    return operation.params.get("summary", {}).get("partitions", [])


# ------------------------------------------------------------------------------------------------------------
# throttles (Kafka's kafka-reassign-partitions does the same: rates on the brokers involved, the replicas to
# throttle on the topics, all removed when the reassignment ends)


def _set_throttle(client: ClusterClient, operation: Operation, rate: int) -> None:
    brokers: set[int] = set()
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for row in _rows(operation):
        brokers.update(row["current"], row["target"])
        leaders.setdefault(row["topic"], []).extend(f"{row['partition']}:{b}" for b in row["current"])
        followers.setdefault(row["topic"], []).extend(f"{row['partition']}:{b}" for b in row["adding"])
    for broker in sorted(brokers):
        client.alter_configs("broker", str(broker), dict.fromkeys(THROTTLE_RATES, str(rate)))
    for topic in sorted(leaders):
        changes = {THROTTLED_REPLICAS[0]: ",".join(leaders[topic])}
        if followers.get(topic):
            changes[THROTTLED_REPLICAS[1]] = ",".join(followers[topic])
        client.alter_configs("topic", topic, changes)


def _remove_throttle(client: ClusterClient, operation: Operation) -> None:
    live = {b.id for b in client.describe_cluster()[2]}
    brokers = {b for row in _rows(operation) for b in (*row["current"], *row["target"])} & live
    for broker in sorted(brokers):
        client.alter_configs("broker", str(broker), dict.fromkeys(THROTTLE_RATES))
    for topic in sorted({row["topic"] for row in _rows(operation)}):
        client.alter_configs("topic", topic, dict.fromkeys(THROTTLED_REPLICAS))


def cancel_in_kafka(operation: Operation) -> None:
    """Cancel the operation's reassignments still pending in Kafka (moves already completed stay) and remove
    its throttle. Idempotent: the cancel action and the task that sees the cancellation may both call it."""
    targets = _targets(operation)
    if not targets or not operation.has_step("submitted"):
        return
    client = client_for(operation.cluster)
    pending = client.ongoing_reassignments(sorted(targets))
    if pending:
        client.reassign(dict.fromkeys(pending))
    elif operation.has_step("reverted"):
        return
    if operation.params.get("throttle_bytes_per_s"):
        _remove_throttle(client, operation)
    done = len(targets) - len(pending)
    operation.record_step(
        "reverted",
        f"{len(pending)} pending partition moves cancelled in Kafka; {done} completed before stay where they are",
    )


# ------------------------------------------------------------------------------------------------------------
# moving replicas


def _copy_progress(client: ClusterClient, operation: Operation, pending: set) -> tuple[int, list[dict]]:
    """Bytes copied per partition to its new replicas, from every broker's DescribeLogDirs."""
    rows = _rows(operation)
    try:
        sizes = client.replica_sizes(sorted({r["topic"] for r in rows}))
    except ConsoleError:
        sizes = {}
    live = []
    for row in rows:
        key = (row["topic"], row["partition"])
        sources = [sizes.get((b, *key), 0) for b in row["current"] if b not in row["adding"]]
        source = max(sources, default=row["bytes"])
        copied = [min(sizes.get((b, *key), 0), source) for b in row["adding"]]
        finished = key not in pending
        live.append(
            {
                "topic": row["topic"],
                "partition": row["partition"],
                "adding": row["adding"],
                "bytes_total": source * len(row["adding"]),
                "bytes_copied": source * len(row["adding"]) if finished else sum(copied),
                "done": finished,
            }
        )
    total = sum(r["bytes_total"] for r in live)
    copied = sum(r["bytes_copied"] for r in live)
    finished = sum(r["done"] for r in live)
    fraction = copied / total if total else (finished / len(live) if live else 1.0)
    return int(5 + 85 * fraction), live


def _move_replicas(operation: Operation) -> dict:
    client = client_for(operation.cluster)
    params = operation.params
    targets = _targets(operation)
    keys = sorted(targets)
    if operation.kind == Kind.FAILOVER and not operation.has_step("confirmed dead"):
        live = {b.id for b in client.describe_cluster()[2]}
        if params["broker"] in live:
            operation.record_step("broker returned", f"broker {params['broker']} is back: nothing moved")
            return {"moved": 0, "broker_returned": True}
        targets = _drop_offline(client, operation, targets, live)
        keys = sorted(targets)
        offline = params.get("offline") or []
        operation.record_step(
            "confirmed dead",
            f"broker {params['broker']} is not in the cluster"
            + (
                f"; {', '.join(offline)} had every in-sync replica there and stay offline until it returns"
                if offline
                else ""
            ),
        )
    if targets and not operation.has_step("submitted"):
        assignment = {
            (p.topic, p.partition): list(p.replicas) for p in client.metadata(max_age_s=0).partitions()
        }
        try:
            planning.check_against(targets, assignment, {b.id for b in client.describe_cluster()[2]})
        except planning.PlanError as exc:
            raise runner.OperationFailed(f"the plan no longer fits the cluster: {exc}") from exc
        rate = params.get("throttle_bytes_per_s")
        if rate and not operation.has_step("throttled"):
            _set_throttle(client, operation, rate)
            operation.record_step("throttled", f"replication throttled to {rate} bytes/s", progress=3)
        refused = client.reassign(targets)
        if refused:
            accepted = [k for k in keys if k not in refused]
            if accepted:
                client.reassign(dict.fromkeys(accepted))
            if rate:
                _remove_throttle(client, operation)
            listing = ", ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(refused.items()))
            raise runner.OperationFailed(f"Kafka refused the reassignment of {listing}; nothing was moved")
        operation.record_step("submitted", f"{len(targets)} partitions reassigned in Kafka", progress=5)
    try:
        while targets:
            pending = set(client.ongoing_reassignments(keys))
            progress, live = _copy_progress(client, operation, pending)
            operation.heartbeat(progress=progress, result={"copy": live})
            if not pending:
                break
            time.sleep(POLL_INTERVAL_S)
    except runner.Stop:
        operation.refresh_from_db()
        if operation.state == State.CANCELLED:
            cancel_in_kafka(operation)
        raise
    if targets and not operation.has_step("verified"):
        operation.record_step("copied", "every new replica caught up and joined the ISR", progress=90)
        _verify(client, operation, targets)
        operation.record_step("verified", "every partition has its planned replicas", progress=95)
    if params.get("throttle_bytes_per_s") and not operation.has_step("throttle removed"):
        _remove_throttle(client, operation)
        operation.record_step("throttle removed", progress=97)
    if operation.kind == Kind.DECOMMISSION and not operation.has_step("stopping"):
        _move_late_replicas(client, operation)
    if operation.kind == Kind.DECOMMISSION:
        _stop_broker(client, operation)
    return {
        **operation.result,
        "moved": sum(len(r["adding"]) for r in _rows(operation)),
        "bytes_moved": operation.params.get("summary", {}).get("bytes_to_move", 0),
    }


def _drop_offline(client: ClusterClient, operation: Operation, targets: dict, live: set[int]) -> dict:
    """A failover's partitions that lost their last live in-sync replica since the proposal (the controller had
    not yet seen the broker die) leave the plan: they have nothing to copy from and are listed as offline."""
    client.metadata(max_age_s=0)  # fresh, for offline_partitions
    lost = set(targets) & proposals.offline_partitions(client, live)
    if not lost:
        return targets
    params = operation.params
    keep = {tp: replicas for tp, replicas in targets.items() if tp not in lost}
    rows = [r for r in _rows(operation) if (r["topic"], r["partition"]) not in lost]
    params["plan"] = planning.to_json(keep)
    params["summary"] = {
        **params.get("summary", {}),
        "partitions": rows,
        "replicas_moved": sum(len(r["adding"]) for r in rows),
        "bytes_to_move": sum(r["bytes_to_move"] for r in rows),
    }
    params["offline"] = sorted({*params.get("offline", []), *(f"{t}-{p}" for t, p in lost)})
    Operation.objects.filter(pk=operation.pk).update(params=params)
    return keep


def _verify(client: ClusterClient, operation: Operation, targets: dict) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        md = client.metadata(max_age_s=0)
        actual = {(p.topic, p.partition): list(p.replicas) for p in md.partitions()}
        wrong = {k: actual.get(k) for k, replicas in targets.items() if actual.get(k) != replicas}
        if not wrong:
            return
        if time.monotonic() > deadline:
            listing = ", ".join(
                f"{t}-{p} has {r}, planned {targets[(t, p)]}" for (t, p), r in sorted(wrong.items())
            )
            raise runner.OperationFailed(f"after the reassignment {listing}")
        operation.heartbeat()
        time.sleep(POLL_INTERVAL_S)


def _move_late_replicas(client: ClusterClient, operation: Operation) -> None:
    """Replicas that reached the leaving broker after the plan was made (a topic created meanwhile, such as the
    console's audit topic) move too, unthrottled, before the broker stops: a decommission leaves nothing behind.
    Resumable: a move already in Kafka is waited for, not submitted again."""
    broker = operation.params["broker"]
    for _ in range(3):  # topics keep being created only in a pathological cluster
        assignment, racks, sizes = proposals.cluster_state(client)
        scope = sorted(tp for tp, replicas in assignment.items() if broker in replicas)
        if not scope:
            return
        if not client.ongoing_reassignments(scope):
            try:
                targets = planning.plan(assignment, racks, sizes, scope=scope, exclude=[broker])
            except planning.PlanError as exc:
                raise runner.OperationFailed(
                    f"broker {broker} received replicas after the plan that cannot move: {exc}"
                ) from exc
            refused = client.reassign(targets)
            if refused:
                listing = ", ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(refused.items()))
                raise runner.OperationFailed(f"Kafka refused to move the late replicas of {listing}")
            listing = ", ".join(f"{t}-{p}" for t, p in scope)
            operation.record_step(
                "late replicas", f"moving {listing}, created on broker {broker} after the plan"
            )
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while client.ongoing_reassignments(scope) or (  # done in Kafka, then shown in metadata
            time.monotonic() < deadline
            and any(broker in p.replicas for p in client.metadata(max_age_s=0).partitions()
                    if (p.topic, p.partition) in scope)
        ):  # fmt: skip
            operation.heartbeat()
            time.sleep(POLL_INTERVAL_S)
    raise runner.OperationFailed(f"broker {broker} keeps receiving new replicas; it was not stopped")


def _stop_broker(client: ClusterClient, operation: Operation) -> None:
    broker_id = operation.params["broker"]
    spec = ManagedBroker.objects.filter(cluster=operation.cluster, broker_id=broker_id).first()
    if spec is None:
        if not operation.has_step("empty"):
            operation.record_step("empty", f"broker {broker_id} holds no replica; stop it where it runs")
        return
    if not operation.has_step("stopping"):
        ManagedBroker.objects.filter(pk=spec.pk).update(should_run=False, decommissioned=True)
        operation.record_step(
            "stopping", f"the supervisor stops broker {broker_id} (controlled shutdown)", progress=98
        )
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while True:
        spec.refresh_from_db()
        registered = broker_id in {b.id for b in client.describe_cluster()[2]}
        if spec.state == BrokerState.STOPPED and not registered:
            break
        if time.monotonic() > deadline:
            raise runner.OperationFailed(
                f"broker {broker_id} did not stop within {STOP_TIMEOUT_S:.0f} s (process {spec.state}, "
                f"{'still' if registered else 'no longer'} registered)"
            )
        operation.heartbeat()
        time.sleep(POLL_INTERVAL_S)
    cluster = operation.cluster
    address = f"{spec.host}:{spec.port}"
    if address in cluster.bootstrap_list and len(cluster.bootstrap_list) > 1:
        cluster.bootstrap_servers = ",".join(h for h in cluster.bootstrap_list if h != address)
        cluster.save(update_fields=["bootstrap_servers"])
    operation.record_step("deregistered", f"broker {broker_id} stopped and left the cluster")


@shared_task(ignore_result=True, acks_late=True)
def reassignment(operation_id: int) -> None:
    """Runs every kind that moves replicas by a plan."""
    kind = Operation.objects.filter(pk=operation_id).values_list("kind", flat=True).first()
    runner.run(operation_id, _move_replicas, audit_action=AUDIT_ACTIONS.get(kind or "", "operation.approve"))


# ------------------------------------------------------------------------------------------------------------
# preferred leader election


def _elect(operation: Operation) -> dict:
    client = client_for(operation.cluster)
    chosen = operation.params.get("partitions")
    keys = None if chosen is None else [tuple(k) for k in chosen]
    if not operation.has_step("elected"):
        failed = client.elect_preferred_leaders(keys)
        if failed:
            listing = ", ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(failed.items()))
            raise runner.OperationFailed(f"the election failed for {listing}")
        operation.record_step(
            "elected", "the controller moved leadership to the preferred replicas", progress=50
        )
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        parts = list(client.metadata(max_age_s=0).partitions())
        if keys is not None:
            parts = [p for p in parts if (p.topic, p.partition) in set(keys)]
        # a preferred replica outside the ISR cannot lead; Kafka leaves those partitions as they are
        waiting = [p for p in parts if p.replicas and p.replicas[0] in p.isr and p.leader != p.replicas[0]]
        if not waiting:
            return {
                "partitions": len(parts),
                "led_by_preferred": sum(p.leader == p.replicas[0] for p in parts if p.replicas),
            }
        if time.monotonic() > deadline:
            raise runner.OperationFailed(
                f"{len(waiting)} partitions are still not led by their preferred replica"
            )
        operation.heartbeat()
        time.sleep(POLL_INTERVAL_S)


@shared_task(ignore_result=True, acks_late=True)
def preferred_leader_election(operation_id: int) -> None:
    runner.run(operation_id, _elect, audit_action="operation.approve")


# ------------------------------------------------------------------------------------------------------------
# resuming, and the failover watch


@shared_task(ignore_result=True)
def resume_stalled() -> None:
    resumed = runner.resume_stalled()
    if resumed:
        log.info("re-queued stalled operations %s", resumed)


@worker_ready.connect
def _resume_at_start(sender=None, **kwargs) -> None:
    """A worker starting after another died: pick up its operations now and once their lease has run out."""
    from django.conf import settings

    resume_stalled.apply_async(queue=settings.CONSOLE_OPERATIONS_QUEUE)
    resume_stalled.apply_async(
        countdown=settings.CONSOLE_OPERATION_LEASE_S + 1, queue=settings.CONSOLE_OPERATIONS_QUEUE
    )


def watch_cluster(cluster: Cluster, now: dt.datetime | None = None) -> Operation | None:
    """Note which brokers are missing; start a failover for one missing longer than the grace period; when the
    cluster wants returning brokers rebalanced in, start a balanced reassignment for a failed-over one that is
    back."""
    now = now or timezone.now()
    client = client_for(cluster)
    try:
        md = client.metadata(max_age_s=0)  # Metadata, unlike DescribeCluster, needs no controller
        live = {b.id for b in md.brokers}
    except ConsoleError:
        return None  # the cluster does not answer at all: nothing can be moved anyway
    known = {b for p in md.partitions() for b in p.replicas}
    known |= set(
        ManagedBroker.objects.filter(cluster=cluster, decommissioned=False).values_list(
            "broker_id", flat=True
        )
    )
    missing = {b: since for b, since in cluster.missing_brokers.items() if int(b) in known - live}
    for broker in known - live:
        missing.setdefault(str(broker), now.isoformat())
    if missing != cluster.missing_brokers:
        Cluster.objects.filter(pk=cluster.pk).update(missing_brokers=missing)
        cluster.missing_brokers = missing
    if cluster.failover_on_return == "rebalance":
        returned = Operation.objects.filter(cluster=cluster, kind=Kind.FAILOVER, state=State.DONE)
        for failover in returned.exclude(result__has_key="rebalance"):
            if failover.params["broker"] in live and not failover.result.get("broker_returned"):
                _start_rebalance(cluster, failover)
    for broker, since in sorted(missing.items()):
        if (now - dt.datetime.fromisoformat(since)).total_seconds() < cluster.failover_grace_s:
            continue
        started = Operation.objects.filter(
            cluster=cluster, kind=Kind.FAILOVER, params__broker=int(broker), created_at__gte=since
        )
        if (
            started.exists()
            or Operation.objects.filter(cluster=cluster, kind=Kind.FAILOVER).exclude(state__in=FINAL).exists()
        ):
            continue
        return _start_failover(cluster, int(broker), since)
    return None


def _start_approved(cluster: Cluster, kind: str, params: dict, broker: int, reason: str) -> Operation:
    """An operation the console starts by itself (no one to approve it), audited as proposed by the watch."""
    params["reason"] = reason
    operation = Operation.objects.create(
        kind=kind, cluster=cluster, state=State.APPROVED, params=params, created_by=None
    )
    record(
        user=None,
        source="worker",
        action_name="operation.propose",
        cluster=cluster,
        resource_type="broker",
        resource_name=str(broker),
        params=params,
        outcome=Outcome.ACCEPTED,
        detail=reason,
        operation=operation,
    )
    runner.enqueue(operation)
    return operation


def _start_failover(cluster: Cluster, broker: int, since: str) -> Operation | None:
    try:
        params = proposals.propose(cluster, Kind.FAILOVER, {"broker": broker})
    except ConsoleError as exc:
        log.warning("failover of broker %s in %s not possible: %s", broker, cluster.name, exc.message)
        return None
    params["missing_since"] = since
    reason = f"broker {broker} missing since {since}, past the {cluster.failover_grace_s} s grace period"
    with transaction.atomic():
        return _start_approved(cluster, Kind.FAILOVER, params, broker, reason)


def _start_rebalance(cluster: Cluster, failover: Operation) -> None:
    """The failed-over broker is back and the cluster wants it rebalanced in: a balanced reassignment."""
    broker = failover.params["broker"]
    try:
        params = proposals.propose(cluster, Kind.REASSIGNMENT, {})
    except ConsoleError as exc:
        Operation.objects.filter(pk=failover.pk).update(result={**failover.result, "rebalance": exc.message})
        return
    with transaction.atomic():
        reason = f"broker {broker} returned after failover #{failover.pk}"
        operation = _start_approved(cluster, Kind.REASSIGNMENT, params, broker, reason)
        Operation.objects.filter(pk=failover.pk).update(result={**failover.result, "rebalance": operation.pk})


@shared_task(ignore_result=True)
def watch_brokers() -> None:
    for cluster in Cluster.objects.filter(failover_grace_s__isnull=False):
        try:
            watch_cluster(cluster)
        except Exception:
            log.exception("failover watch of %s failed", cluster.name)
