"""Reassignment plans: pure functions over a cluster's assignment, brokers (with racks) and partition sizes.

`plan(...)` proposes target replica lists that
1. put every partition at its wanted replication factor on eligible brokers (a failed or leaving broker is not
   eligible): a replica on an ineligible broker is dropped and a new one added last, an extra one dropped from
   the busiest broker; a new replica goes to a rack the partition does not use yet, then to the broker with
   the fewest replicas;
2. when asked to rebalance, moves replicas from the broker with the most to the one with the fewest until they
   differ by at most one, each time moving the smallest partition that can go (the least data) and never
   lowering the number of racks a partition spans;
3. when asked to rebalance, reorders replicas (no data moves) so that preferred leaders spread evenly.

Only partitions whose replica list changes are in the plan. The plan's file format is the one of Kafka's
`kafka-reassign-partitions` tool: {"version": 1, "partitions": [{"topic", "partition", "replicas"}]}.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

TP = tuple[str, int]


class PlanError(ValueError):
    """The plan cannot be made or is malformed; the message says why."""


def plan(
    assignment: Mapping[TP, list[int]],
    racks: Mapping[int, str | None],
    sizes: Mapping[TP, int],
    *,
    exclude: Iterable[int] = (),
    replication_factor: Mapping[TP, int] | None = None,
    scope: Iterable[TP] | None = None,
    rebalance: bool = False,
) -> dict[TP, list[int]]:
    """Target replicas per changed partition. `racks` lists the live brokers; `scope` limits which partitions
    may change (all by default); `replication_factor` overrides a partition's current one."""
    excluded = set(exclude)
    eligible = sorted(b for b in racks if b not in excluded)
    movable = set(assignment) if scope is None else set(scope) & set(assignment)
    wanted = dict(replication_factor or {})
    target = {tp: list(replicas) for tp, replicas in assignment.items()}
    load = Counter({b: 0 for b in eligible})
    for replicas in target.values():
        load.update(r for r in replicas if r in load)

    def rack_of(b: int) -> str:
        return racks.get(b) or f"broker-{b}"  # a broker without a rack is a rack of its own

    for tp in sorted(movable):
        replicas = target[tp]
        rf = wanted.get(tp, len(replicas))
        if rf > len(eligible):
            raise PlanError(
                f"{tp[0]}-{tp[1]} needs {rf} replicas but only {len(eligible)} eligible brokers are live"
            )
        keep = [r for r in replicas if r in load]
        while len(keep) > rf:  # drop the replica on the busiest broker, the preferred leader last
            victim = max(keep[1:] or keep, key=lambda b: (load[b], b))
            keep.remove(victim)
            load[victim] -= 1
        out = keep  # survivors keep their order; new replicas go last (not preferred leaders while they copy)
        while len(out) < rf:
            used_racks = {rack_of(b) for b in out}
            choice = min(
                (b for b in eligible if b not in out), key=lambda b: (rack_of(b) in used_racks, load[b], b)
            )
            out.append(choice)
            load[choice] += 1
        target[tp] = out

    if rebalance and len(eligible) > 1:
        _balance_replicas(target, movable, eligible, load, sizes, rack_of)
        _balance_leaders(target, movable, eligible)
    return {tp: replicas for tp, replicas in target.items() if replicas != list(assignment[tp])}


def _balance_replicas(target, movable, eligible, load, sizes, rack_of) -> None:
    stuck: set[tuple[int, int]] = set()
    for _ in range(10 * len(target) + 10):
        ordered = sorted(eligible, key=lambda b: (load[b], b))
        pairs = [(hi, lo) for hi in reversed(ordered) for lo in ordered if load[hi] - load[lo] > 1]
        pairs = [p for p in pairs if p not in stuck]
        if not pairs:
            return
        hi, lo = pairs[0]
        candidates = []
        for tp in movable:
            replicas = target[tp]
            if hi not in replicas or lo in replicas:
                continue
            moved = [lo if r == hi else r for r in replicas]
            if len({rack_of(b) for b in moved}) < len({rack_of(b) for b in replicas}):
                continue
            candidates.append((sizes.get(tp, 0), tp, moved))
        if not candidates:
            stuck.add((hi, lo))
            continue
        _, tp, moved = min(candidates)
        target[tp] = moved
        load[hi] -= 1
        load[lo] += 1


def _balance_leaders(target, movable, eligible) -> None:
    leaders = Counter({b: 0 for b in eligible})
    leaders.update(replicas[0] for replicas in target.values() if replicas)
    for tp in sorted(movable):
        replicas = target[tp]
        if len(replicas) < 2:
            continue
        best = min(replicas, key=lambda b: (leaders[b], replicas.index(b)))
        if leaders[best] + 1 < leaders[replicas[0]]:
            leaders[replicas[0]] -= 1
            leaders[best] += 1
            target[tp] = [best, *[r for r in replicas if r != best]]


# ------------------------------------------------------------------------------------------------------------
# the plan file, and what a plan moves


def to_json(targets: Mapping[TP, list[int]]) -> dict:
    return {
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": list(replicas)}
            for (t, p), replicas in sorted(targets.items())
        ],
    }


def from_json(document: object) -> dict[TP, list[int]]:
    """A kafka-reassign-partitions plan (log_dirs, if present, must be "any": moves between a broker's log
    dirs are not supported)."""
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise PlanError('a plan is {"version": 1, "partitions": [{"topic", "partition", "replicas"}, ...]}')
    if document.get("version", 1) != 1:
        raise PlanError(f"plan version {document.get('version')!r} is not supported (only 1)")
    if not document["partitions"]:
        raise PlanError("the plan moves no partition")
    out: dict[TP, list[int]] = {}
    for i, entry in enumerate(document["partitions"]):
        where = f"partitions[{i}]"
        if not isinstance(entry, dict):
            raise PlanError(f"{where} must be an object")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f"{where}.topic must be a topic name")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise PlanError(f"{where}.partition must be a partition number")
        if (
            not isinstance(replicas, list)
            or not replicas
            or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in replicas)
        ):
            raise PlanError(f"{where}.replicas must be a non-empty list of broker ids")
        if len(set(replicas)) != len(replicas):
            raise PlanError(f"{where}.replicas lists a broker twice")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (not isinstance(log_dirs, list) or any(d != "any" for d in log_dirs)):
            raise PlanError(f'{where}.log_dirs: only "any" is supported')
        if (topic, partition) in out:
            raise PlanError(f"{where}: {topic}-{partition} is in the plan twice")
        out[(topic, partition)] = replicas
    return out


def check_against(
    targets: Mapping[TP, list[int]], assignment: Mapping[TP, list[int]], live_brokers: Iterable[int]
) -> None:
    """Every partition exists and every target broker is live."""
    live = set(live_brokers)
    for (topic, partition), replicas in sorted(targets.items()):
        if (topic, partition) not in assignment:
            raise PlanError(f"{topic}-{partition} does not exist")
        dead = sorted(set(replicas) - live)
        if dead:
            raise PlanError(f"{topic}-{partition}: broker(s) {dead} are not live brokers of the cluster")


def summary(
    targets: Mapping[TP, list[int]], assignment: Mapping[TP, list[int]], sizes: Mapping[TP, int]
) -> dict:
    """What the plan does, for review: per partition its replicas before and after and the bytes to copy."""
    rows = []
    for (topic, partition), replicas in sorted(targets.items()):
        current = list(assignment.get((topic, partition), []))
        adding = [b for b in replicas if b not in current]
        size = int(sizes.get((topic, partition), 0))
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "current": current,
                "target": list(replicas),
                "adding": adding,
                "removing": [b for b in current if b not in replicas],
                "bytes": size,
                "bytes_to_move": size * len(adding),
            }
        )
    return {
        "partitions": rows,
        "replicas_moved": sum(len(r["adding"]) for r in rows),
        "bytes_to_move": sum(r["bytes_to_move"] for r in rows),
    }
