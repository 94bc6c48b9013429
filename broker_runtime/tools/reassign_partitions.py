"""`python -m broker_runtime.tools.reassign_partitions`: Kafka's kafka-reassign-partitions over the Kafka protocol
(AlterPartitionReassignments, ListPartitionReassignments, IncrementalAlterConfigs), with its flags, JSON formats
and output.

    --generate --topics-to-move-json-file F --broker-list 0,1,2 [--disable-rack-aware]
    --execute  --reassignment-json-file F [--throttle BYTES_PER_S] [--additional]
    --verify   --reassignment-json-file F [--preserve-throttles]
    --cancel   --reassignment-json-file F [--preserve-throttles]
    --list

Plans: {"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[1,2,3],"log_dirs":["any","any","any"]}]}
(log_dirs optional; moving a replica between a broker's log dirs is not supported). The first replica is the
preferred leader. --throttle sets Kafka's leader/follower.replication.throttled.rate on the brokers involved and
the *.replication.throttled.replicas of the topics; --verify clears them once every move is done.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from broker_runtime.cluster.topics import assign_replicas
from broker_runtime.errors import KafkaError
from broker_runtime.tools import run
from broker_runtime.tools.admin_client import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    AdminClient,
    AdminError,
    load_properties,
)

TopicPartition = tuple[str, int]
BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used to "
    "change the throttle by resubmitting the current reassignment."
)
VERIFY_WARNING = "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed."


class CommandError(Exception):
    pass


def tp_str(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def plan_json(assignment: dict[TopicPartition, list[int]]) -> str:
    partitions = [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def parse_plan(text: str) -> dict[TopicPartition, list[int]]:
    try:
        data = json.loads(text)
        entries = data["partitions"]
        plan: dict[TopicPartition, list[int]] = {}
        for e in entries:
            tp = (str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
            if tp in plan:
                raise CommandError(f"The proposed assignment contains multiple entries for {tp_str(tp)}")
            if len(set(replicas)) != len(replicas):
                raise CommandError(f"Partition replica lists may not contain duplicate entries: {tp_str(tp)}")
            log_dirs = e.get("log_dirs")
            if log_dirs is not None:
                if len(log_dirs) != len(replicas):
                    raise CommandError(f"Size of replicas list {replicas} is different from size of log dirs list "
                                       f"{log_dirs} for partition {tp_str(tp)}")  # fmt: skip
                if any(d != "any" for d in log_dirs):
                    raise CommandError("Moving replicas between log directories is not supported (log_dirs must be "
                                       '"any")')  # fmt: skip
            plan[tp] = replicas
    except (ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"The reassignment JSON is not valid: {exc!r}") from None
    if not plan:
        raise CommandError("Partition reassignment list cannot be empty")
    return plan


class ReassignCommand:
    def __init__(self, args: argparse.Namespace, admin: AdminClient, out=sys.stdout) -> None:
        self.args = args
        self.admin = admin
        self.out = out

    def print(self, text: str = "") -> None:
        print(text, file=self.out)

    def _read(self, path: str | None, option: str) -> str:
        if not path:
            raise CommandError(f'Missing required argument "[{option}]"')
        with open(path) as f:
            return f.read()

    def current(self, topics: Sequence[str]) -> dict[TopicPartition, list[int]]:
        response = self.admin.metadata(sorted(set(topics)))
        out = {}
        for t in response.topics:
            if t.error_code != ErrorCode.none:
                raise CommandError(f"Topic {t.name} not found")
            for p in t.partitions:
                out[(t.name, p.partition_index)] = list(p.replica_nodes)
        return out

    # --- actions

    def generate(self) -> None:
        a = self.args
        data = json.loads(self._read(a.topics_to_move_json_file, "topics-to-move-json-file"))
        topics = [t["topic"] for t in data.get("topics", [])]
        if len(set(topics)) != len(topics):
            raise CommandError(f"List of topics to reassign contains duplicate entries: {topics}")
        if not a.broker_list:
            raise CommandError('Missing required argument "[broker-list]"')
        brokers = [int(b) for b in a.broker_list.split(",") if b.strip()]
        if len(set(brokers)) != len(brokers):
            raise CommandError(f"Broker list contains duplicate entries: {brokers}")
        nodes = {n.node_id: n for n in self.admin.nodes()}
        missing = [b for b in brokers if b not in nodes]
        if missing:
            raise CommandError(f"The following brokers are not alive: {','.join(map(str, missing))}")
        racks = None if a.disable_rack_aware else {b: nodes[b].rack for b in brokers}
        if racks and any(r is None for r in racks.values()) and any(r is not None for r in racks.values()):
            raise CommandError("Not all brokers have rack information. Add --disable-rack-aware in command line "
                               "to make replica assignment without rack information.")  # fmt: skip
        current = self.current(topics)
        proposed: dict[TopicPartition, list[int]] = {}
        for topic in topics:
            parts = sorted(p for t, p in current if t == topic)
            rf = len(current[(topic, parts[0])])
            try:
                placed = assign_replicas(brokers, len(parts), rf, start_index=-1, racks=racks)
            except KafkaError as exc:
                raise CommandError(exc.message) from None
            proposed.update({(topic, p): placed[p] for p in parts})
        self.print(f"Current partition replica assignment\n{plan_json(current)}\n")
        self.print(f"Proposed partition reassignment configuration\n{plan_json(proposed)}")

    def execute(self) -> None:
        a = self.args
        plan = parse_plan(self._read(a.reassignment_json_file, "reassignment-json-file"))
        if not a.additional and self.admin.list_partition_reassignments():
            raise CommandError(EXISTING)
        live = {n.node_id for n in self.admin.nodes()}
        unknown = sorted({b for r in plan.values() for b in r} - live)
        if unknown:
            raise CommandError(f"Unknown broker id(s) {','.join(map(str, unknown))}")
        current = self.current([t for t, _ in plan])
        missing = [tp for tp in plan if tp not in current]
        if missing:
            raise CommandError(f"Topic {missing[0][0]} not found" if missing[0][0] not in {t for t, _ in current}
                               else f"Unable to find partition: {tp_str(missing[0])}")  # fmt: skip
        self.print("Current partition replica assignment\n\n"
                   f"{plan_json({tp: current[tp] for tp in plan})}\n\n"
                   "Save this to use as the --reassignment-json-file option during rollback")  # fmt: skip
        if a.throttle >= 0:
            self.print(VERIFY_WARNING)
            self._set_throttles(plan, current, a.throttle)
        results = self.admin.alter_partition_reassignments(plan)
        errors = {tp: r for tp, r in results.items() if r[0] != ErrorCode.none}
        if errors:
            raise CommandError("Error reassigning partition(s):\n" + "\n".join(
                f"{tp_str(tp)}: {message or code.name.upper()}" for tp, (code, message) in sorted(errors.items())
            ))  # fmt: skip
        self.print(f"Successfully started partition reassignment{'' if len(plan) == 1 else 's'} for "
                   f"{','.join(tp_str(tp) for tp in sorted(plan))}")  # fmt: skip

    def _set_throttles(self, plan, current, rate: int) -> None:
        leader: dict[str, list[str]] = {}
        follower: dict[str, list[str]] = {}
        brokers: set[int] = set()
        for (topic, p), target in plan.items():
            source = current[(topic, p)]
            moving = [b for b in target if b not in source]
            if not moving:
                continue
            leader.setdefault(topic, []).extend(f"{p}:{b}" for b in source)
            follower.setdefault(topic, []).extend(f"{p}:{b}" for b in moving)
            brokers |= set(source) | set(moving)
        for topic in sorted(set(leader) | set(follower)):
            self.admin.alter_configs(TOPIC_RESOURCE, topic, {
                "leader.replication.throttled.replicas": ",".join(leader.get(topic, [])),
                "follower.replication.throttled.replicas": ",".join(follower.get(topic, [])),
            })  # fmt: skip
        nodes = {n.node_id: n for n in self.admin.nodes()}
        for broker in sorted(brokers):
            self.admin.alter_configs(
                BROKER_RESOURCE,
                str(broker),
                dict.fromkeys(BROKER_THROTTLES, str(rate)),
                node=nodes.get(broker),
            )
        self.print(f"The inter-broker throttle limit was set to {rate} B/s")

    def _clear_throttles(self, plan) -> None:
        nodes = {n.node_id: n for n in self.admin.nodes()}
        brokers = sorted(set(nodes) | {b for r in plan.values() for b in r})
        self.print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
                   f"{','.join(map(str, brokers))}")  # fmt: skip
        for broker in brokers:
            if broker in nodes:
                self.admin.alter_configs(
                    BROKER_RESOURCE, str(broker), delete=BROKER_THROTTLES, node=nodes[broker]
                )
        topics = sorted({t for t, _ in plan})
        self.print(
            f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}"
        )
        for topic in topics:
            self.admin.alter_configs(TOPIC_RESOURCE, topic, delete=TOPIC_THROTTLES)

    def verify(self) -> None:
        a = self.args
        plan = parse_plan(self._read(a.reassignment_json_file, "reassignment-json-file"))
        ongoing = self.admin.list_partition_reassignments()
        current = self.current([t for t, _ in plan])
        lines = ["Status of partition reassignment:"]
        for tp in sorted(plan):
            if tp in ongoing:
                lines.append(f"Reassignment of partition {tp_str(tp)} is still in progress.")
            elif current.get(tp) == plan[tp]:
                lines.append(f"Reassignment of partition {tp_str(tp)} is completed.")
            else:
                lines.append(
                    f"There is no active reassignment of partition {tp_str(tp)}, but replica set is "
                    f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, plan[tp]))}."
                )
        self.print("\n".join(lines))
        if not ongoing and not a.preserve_throttles:
            self._clear_throttles(plan)

    def cancel(self) -> None:
        a = self.args
        plan = parse_plan(self._read(a.reassignment_json_file, "reassignment-json-file"))
        cancelling = sorted(self.admin.list_partition_reassignments(list(plan)))
        if cancelling:
            results = self.admin.alter_partition_reassignments(dict.fromkeys(cancelling))
            errors = {tp: r for tp, r in results.items() if r[0] != ErrorCode.none}
            if errors:
                raise CommandError(
                    f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:\n"
                    + "\n".join(f"{tp_str(tp)}: {m or c.name.upper()}" for tp, (c, m) in errors.items())
                )
            self.print(f"Successfully cancelled partition reassignment{'' if len(cancelling) == 1 else 's'} for: "
                       f"{','.join(tp_str(tp) for tp in cancelling)}")  # fmt: skip
        else:
            self.print("None of the specified partition reassignments are active.")
        if not a.preserve_throttles:
            self._clear_throttles(plan)

    def list(self) -> None:
        listed = self.admin.list_partition_reassignments()
        if not listed:
            self.print("No partition reassignments found.")
            return
        lines = ["Current partition reassignments:"]
        for tp, (replicas, adding, removing) in sorted(listed.items()):
            line = f"{tp_str(tp)}: replicas: {','.join(map(str, replicas))}."
            if adding:
                line += f" adding: {','.join(map(str, adding))}."
            if removing:
                line += f" removing: {','.join(map(str, removing))}."
            lines.append(line)
        self.print("\n".join(lines))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m broker_runtime.tools.reassign_partitions",
        description="Move partitions between brokers (Kafka's kafka-reassign-partitions).",
    )
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--command-config")
    for action in ("generate", "execute", "verify", "cancel", "list"):
        p.add_argument(f"--{action}", action="store_true")
    p.add_argument("--topics-to-move-json-file")
    p.add_argument("--reassignment-json-file")
    p.add_argument("--broker-list")
    p.add_argument("--disable-rack-aware", action="store_true")
    p.add_argument("--throttle", type=int, default=-1, help="inter-broker throttle, bytes/s")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1)
    p.add_argument("--additional", action="store_true")
    p.add_argument("--preserve-throttles", action="store_true")
    p.add_argument("--timeout", type=int, default=10000, help="ms (default 10000)")
    return p


def main(argv: Sequence[str] | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    actions = [a for a in ("generate", "execute", "verify", "cancel", "list") if getattr(args, a)]
    if len(actions) != 1:
        parser.print_usage(err)
        print(
            "Command must include exactly one action: --generate, --execute, --verify, --cancel, --list",
            file=err,
        )
        return 1
    if args.replica_alter_log_dirs_throttle >= 0:
        print("Error: moving replicas between log directories is not supported", file=out)
        return 1
    props = load_properties(args.command_config)
    timeout_ms = int(props.get("request.timeout.ms", max(args.timeout, 30000)))
    try:
        with AdminClient(args.bootstrap_server, client_id="odradek-reassign", timeout_ms=timeout_ms) as admin:
            getattr(ReassignCommand(args, admin, out), actions[0])()
        return 0
    except CommandError as exc:
        print(str(exc), file=out)
        return 1
    except (AdminError, OSError, ValueError) as exc:
        print(f"Error: {exc}", file=out)
        return 1


if __name__ == "__main__":
    sys.exit(run(main))
