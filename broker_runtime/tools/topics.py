"""`python -m broker_runtime.tools.topics`: Kafka's kafka-topics over the Kafka protocol, with its flags and output.

    --bootstrap-server HOST:PORT (--create | --list | --describe | --alter | --delete) [--topic T] ...
    --create --topic T [--partitions N] [--replication-factor N | --replica-assignment 0:1,1:2] [--config k=v]...
    --describe [--topic REGEX] [--under-replicated-partitions | --unavailable-partitions |
               --under-min-isr-partitions | --at-min-isr-partitions | --topics-with-overrides]
    --alter --topic REGEX --partitions N [--replica-assignment ...]
    --delete --topic REGEX [--if-exists]

`--topic` is a regular expression except with --create, as in Kafka. Topic configs are changed with
IncrementalAlterConfigs (kafka-configs), not here, as in Kafka 3.x.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker_runtime.tools import run
from broker_runtime.tools.admin_client import TOPIC_RESOURCE, AdminClient, AdminError, load_properties

DEFAULT_SOURCE = 5  # DescribeConfigs: DEFAULT_CONFIG
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


class CommandError(Exception):
    """A mistake in the command line or a state Kafka's tool refuses; printed as Kafka prints it."""


@dataclass
class PartitionView:
    topic: str
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    adding: list[int]
    removing: list[int]

    @property
    def replication_factor(self) -> int:
        return len(self.replicas) - len(self.removing)

    @property
    def has_leader(self) -> bool:
        return self.leader >= 0

    def line(self) -> str:
        out = (
            f"\tTopic: {self.topic}\tPartition: {self.partition}\tLeader: {self.leader if self.has_leader else 'none'}"
            f"\tReplicas: {_ids(self.replicas)}\tIsr: {_ids(self.isr)}"
        )
        if self.adding or self.removing:
            out += f"\tAdding Replicas: {_ids(self.adding)}\tRemoving Replicas: {_ids(self.removing)}"
        return out + "\tElr: N/A\tLastKnownElr: N/A"


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids)


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's --replica-assignment: partitions separated by ',', their replicas by ':' (`0:1,1:2`)."""
    out = {}
    for partition, replicas in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in replicas.split(":")]
        except ValueError:
            raise CommandError(f"Invalid replica assignment '{text}': broker ids must be integers") from None
        if len(set(brokers)) != len(brokers):
            raise CommandError(f"Partition replica lists may not contain duplicate entries: {replicas}")
        out[partition] = brokers
        if len(brokers) != len(out[0]):
            raise CommandError(f"Partition {partition} has different replication factor: {brokers}")
    return out


class TopicCommand:
    def __init__(self, args: argparse.Namespace, admin: AdminClient, out=sys.stdout) -> None:
        self.args = args
        self.admin = admin
        self.out = out

    def print(self, text: str = "") -> None:
        print(text, file=self.out)

    def topics(self) -> list[str]:
        """Topics matching --topic (a regular expression, as Kafka's IncludeList), all without it."""
        names = sorted(t.name for t in self.admin.metadata().topics if t.error_code == ErrorCode.none)
        if self.args.exclude_internal:
            names = [n for n in names if n not in INTERNAL_TOPICS]
        if self.args.topic is None:
            return names
        try:
            pattern = re.compile(self.args.topic.strip().strip('"'))
        except re.error as exc:
            raise CommandError(f"'{self.args.topic}' is not a regular expression: {exc}") from None
        return [n for n in names if pattern.fullmatch(n)]

    def ensure_found(self, topics: list[str]) -> None:
        if not topics and not self.args.if_exists:
            raise CommandError(f"Topic '{self.args.topic}' does not exist as expected")

    # --- actions

    def create(self) -> None:
        a = self.args
        if not a.topic:
            raise CommandError('Missing required argument "[topic]"')
        if "." in a.topic or "_" in a.topic:
            self.print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore "
                       "('_') could collide. To avoid issues it is best to use either, but not both.")  # fmt: skip
        if a.replication_factor is not None and not 1 <= a.replication_factor <= 32767:
            raise CommandError("The replication factor must be between 1 and 32767 inclusive")
        if a.partitions is not None and a.partitions < 1:
            raise CommandError("The partitions must be greater than 0")
        assignment = parse_replica_assignment(a.replica_assignment) if a.replica_assignment else None
        if assignment and (a.partitions is not None or a.replication_factor is not None):
            raise CommandError("Option \"[replica-assignment]\" can't be used with option \"[partitions]\" or "
                               "\"[replication-factor]\"")  # fmt: skip
        configs = dict(_config_pair(c) for c in a.config or ())
        try:
            self.admin.create_topic(
                a.topic, -1 if a.partitions is None else a.partitions,
                -1 if a.replication_factor is None else a.replication_factor, configs, assignment,
            )  # fmt: skip
        except AdminError as exc:
            if exc.error == ErrorCode.topic_already_exists and a.if_not_exists:
                return
            raise
        self.print(f"Created topic {a.topic}.")

    def list(self) -> None:
        topics = self.topics()
        if topics:
            self.print("\n".join(topics))

    def alter(self) -> None:
        a = self.args
        if a.partitions is None:
            raise CommandError('Missing required argument "[partitions]"')
        topics = self.topics()
        self.ensure_found(topics)
        assignment = parse_replica_assignment(a.replica_assignment) if a.replica_assignment else None
        for topic in topics:
            current = len(self.admin.topic_partitions(topic))
            new = None
            if assignment is not None:
                new = [assignment[p] for p in sorted(assignment) if p >= current]
            self.admin.create_partitions(topic, a.partitions, new)

    def delete(self) -> None:
        topics = self.topics()
        self.ensure_found(topics)
        for topic in topics:
            if topic in INTERNAL_TOPICS:
                raise CommandError(
                    f"Topic {topic} is a kafka internal topic and is not allowed to be marked for deletion."
                )
        if topics:
            for name, (error, message) in self.admin.delete_topics(topics).items():
                if error != ErrorCode.none:
                    raise AdminError(error, message or name)

    def describe(self) -> None:
        a = self.args
        topics = self.topics()
        self.ensure_found(topics)
        if not topics:
            return
        response = self.admin.metadata(topics)
        live = {b.node_id for b in response.brokers}
        configs = self.admin.describe_configs(TOPIC_RESOURCE, topics)
        reassigning = self.admin.list_partition_reassignments(
            [(t.name, p.partition_index) for t in response.topics for p in t.partitions]
        )
        reports = (a.under_replicated_partitions, a.unavailable_partitions, a.under_min_isr_partitions,
                   a.at_min_isr_partitions)  # fmt: skip
        describe_configs = not any(reports)
        for t in sorted(response.topics, key=lambda t: t.name):
            entries = configs.get(t.name, [])
            overrides = [e for e in entries if e.config_source != DEFAULT_SOURCE]
            min_isr = int(next((e.value for e in entries if e.name == "min.insync.replicas"), "1") or 1)
            partitions = [
                PartitionView(t.name, p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes),
                              *[list(x) for x in reassigning.get((t.name, p.partition_index), ([], [], []))[1:]])
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            ]  # fmt: skip
            if describe_configs and (not a.topics_with_overrides or overrides):
                first = partitions[0] if partitions else None
                topic_id = getattr(t, "topic_id", None)
                line = f"Topic: {t.name}"
                if topic_id is not None and topic_id.int:
                    line += f"\tTopicId: {_kafka_uuid(topic_id)}"
                line += f"\tPartitionCount: {len(partitions)}"
                line += f"\tReplicationFactor: {first.replication_factor if first else 0}"
                line += "\tConfigs: " + ",".join(f"{e.name}={e.value}" for e in overrides)
                self.print(line)
            if a.topics_with_overrides:
                continue
            for p in partitions:
                printed = describe_configs or (
                    (a.under_replicated_partitions and p.replication_factor - len(p.isr) > 0)
                    or (a.unavailable_partitions and (not p.has_leader or p.leader not in live))
                    or (a.under_min_isr_partitions and (not p.has_leader or len(p.isr) < min_isr))
                    or (a.at_min_isr_partitions and len(p.isr) == min_isr)
                )  # fmt: skip
                if printed:
                    self.print(p.line())


def _config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CommandError(
            f'Invalid topic config: all configs to be added must be in the format "key=val": {text}'
        )
    return key.strip(), value.strip()


def _kafka_uuid(value) -> str:
    import base64

    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m broker_runtime.tools.topics", description="Create, delete, describe, or "
                                "change a topic (Kafka's kafka-topics).")  # fmt: skip
    p.add_argument("--bootstrap-server", required=True, help="REQUIRED: The Kafka server to connect to.")
    p.add_argument(
        "--command-config", help="Property file of admin client settings (request.timeout.ms is used)"
    )
    for action in ("create", "list", "describe", "alter", "delete"):
        p.add_argument(f"--{action}", action="store_true")
    p.add_argument("--topic", help="The topic (a regular expression except with --create)")
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument(
        "--replica-assignment", help="broker_id_for_part1_replica1:broker_id_for_part1_replica2,..."
    )
    p.add_argument("--config", action="append", help="A topic config override, name=value (repeatable)")
    p.add_argument("--if-exists", action="store_true")
    p.add_argument("--if-not-exists", action="store_true")
    p.add_argument("--exclude-internal", action="store_true")
    p.add_argument("--under-replicated-partitions", action="store_true")
    p.add_argument("--unavailable-partitions", action="store_true")
    p.add_argument("--under-min-isr-partitions", action="store_true")
    p.add_argument("--at-min-isr-partitions", action="store_true")
    p.add_argument("--topics-with-overrides", action="store_true")
    return p


def main(argv: Sequence[str] | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    actions = [a for a in ("create", "list", "describe", "alter", "delete") if getattr(args, a)]
    if len(actions) != 1:
        parser.print_usage(err)
        print(
            "Command must include exactly one action: --list, --describe, --create, --alter or --delete",
            file=err,
        )
        return 1
    props = load_properties(args.command_config)
    timeout_ms = int(props.get("request.timeout.ms", props.get("default.api.timeout.ms", "30000")))
    try:
        with AdminClient(args.bootstrap_server, client_id="odradek-topics", timeout_ms=timeout_ms) as admin:
            getattr(TopicCommand(args, admin, out), actions[0])()
        return 0
    except (CommandError, AdminError, OSError, ValueError) as exc:
        print(f"Error while executing topic command : {_message(exc)}", file=out)
        return 1


def _message(exc: Exception) -> str:
    if isinstance(exc, AdminError):
        return exc.message or exc.error.name.upper()
    return str(exc)


if __name__ == "__main__":
    sys.exit(run(main))
