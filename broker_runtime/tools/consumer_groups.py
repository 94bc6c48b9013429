"""`python -m broker_runtime.tools.consumer_groups`: list, describe, reset and delete consumer groups, like
Kafka's `kafka-consumer-groups.sh`.

It talks to the cluster only over the Kafka protocol, as any client would, through the tools' own admin client
(`admin_client.py`, kio-based: no dependency beyond the broker's). Output, option names and messages follow
Kafka's ConsumerGroupCommand. Deliberate difference: errors Kafka only prints ("Error: ...") also set the exit
code to 1, so scripts can tell.

    --list [--state [STATES]]
    --describe (--group G ... | --all-groups) [--offsets | --members [--verbose] | --state]
    --reset-offsets (--group G ... | --all-groups) (--topic T[:P,...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N | --to-datetime DT
         | --by-duration PnDTnHnMnS | --from-file CSV) [--dry-run | --execute] [--export]
    --delete (--group G ... | --all-groups)
    --delete-offsets --group G --topic T[:P,...] ...
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker_runtime.tools import run
from broker_runtime.tools.admin_client import EARLIEST, LATEST, AdminClient, AdminError, load_properties

MISSING = "-"
ACTIVE_STATES = {"PreparingRebalance", "CompletingRebalance", "Stable", "Assigning", "Reconciling"}
KNOWN_STATES = (
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
)
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In a future major release, the default "
    "behavior of this command will be to prompt the user before executing the reset rather than doing a dry run. "
    "You should add the --dry-run option explicitly if you are scripting this command and want to keep the "
    "current default behavior without prompting."
)


class UsageError(Exception):
    """A problem with the command line: printed with the usage, exit code 1 (Kafka: printUsageAndExit)."""


class CommandError(Exception):
    """A problem the cluster reported: printed as 'Error: ...', exit code 1."""


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


# --- the cluster, through the Kafka protocol ----------------------------------------------------------------


class Cluster:
    """The admin operations the command needs, over Odradek's own admin client (tools/admin_client.py)."""

    def __init__(self, bootstrap: str, timeout_ms: int, config: dict[str, str]) -> None:
        unsupported = sorted(set(config) - _CLIENT_SETTINGS)
        if unsupported:
            raise UsageError(f"Unsupported client setting(s) in --command-config: {', '.join(unsupported)}")
        self.admin = AdminClient(
            bootstrap, client_id=config.get("client.id", "odradek-consumer-groups"), timeout_ms=timeout_ms
        )

    def list_groups(self, states: set[str] | None = None) -> list[tuple[str, str]]:
        wanted = {_kafka_state_name(s) for s in states or ()}
        # Consumer groups only, as Kafka's admin client lists them: protocol type "consumer", or none yet.
        groups = self.admin.list_groups(sorted(wanted))
        return [(g, state) for g, state, protocol_type in groups if protocol_type in ("consumer", "")]

    def describe(self, group_ids: Sequence[str]) -> dict[str, GroupInfo]:
        out = {}
        for group_id, g in self.admin.describe_groups(group_ids).items():
            members = [
                MemberInfo(m.member_id, m.group_instance_id or "", m.host, m.client_id,
                           sorted(TopicPartition(t, p) for t, p in m.assignment))
                for m in g.members
            ]  # fmt: skip
            coordinator = f"{g.coordinator.host}:{g.coordinator.port}  ({g.coordinator.node_id})"
            out[group_id] = GroupInfo(group_id, g.state, g.protocol, coordinator, members)
        return out

    def committed(self, group_id: str) -> dict[TopicPartition, int]:
        return {TopicPartition(*tp): o for tp, o in self.admin.list_group_offsets(group_id).items()}

    def log_offsets(self, partitions: Iterable[TopicPartition], spec: str, timestamp: int = 0) -> dict:
        """{partition: offset (or -1 when nothing matches a timestamp)} for spec earliest | latest | timestamp."""
        partitions = list(partitions)
        if not partitions:
            return {}
        target = {"earliest": EARLIEST, "latest": LATEST}.get(spec, timestamp)
        found = self.admin.list_offsets([(tp.topic, tp.partition) for tp in partitions], target)
        return {TopicPartition(*tp): offset for tp, offset in found.items()}

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        # Metadata without auto-creation: a misspelled topic is not created.
        try:
            return [TopicPartition(topic, p) for p in self.admin.topic_partitions(topic)]
        except AdminError as exc:
            raise CommandError(f"Topic '{topic}' does not exist or is not available: {exc}") from None

    def alter_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        errors = self.admin.alter_group_offsets(
            group_id, {(tp.topic, tp.partition): o for tp, o in offsets.items()}
        )
        failed = [(tp, e) for tp, e in sorted(errors.items()) if e != ErrorCode.none]
        if failed:
            (topic, partition), error = failed[0]
            raise CommandError(
                f"Committing offsets for group '{group_id}' failed: {topic}-{partition}: {error.name.upper()}"
            )

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for group_id in group_ids:
            try:
                error = self.admin.delete_groups([group_id])[group_id]
                out[group_id] = None if error == ErrorCode.none else str(AdminError(error))
            except AdminError as exc:
                out[group_id] = str(exc)
        return out

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]) -> tuple[str, dict]:
        """OffsetDelete: (top-level error name, {partition: error name or None})."""
        error, results = self.admin.delete_group_offsets(
            group_id, [(tp.topic, tp.partition) for tp in partitions]
        )
        return error.name.upper(), {
            TopicPartition(*tp): None if e == ErrorCode.none else e.name.upper() for tp, e in results.items()
        }


# Client settings --command-config may carry: the ones this client has (no TLS or SASL to configure).
_CLIENT_SETTINGS = {"client.id"}


@dataclass
class MemberInfo:
    member_id: str
    group_instance_id: str
    host: str
    client_id: str
    assignment: list[TopicPartition]


@dataclass
class GroupInfo:
    group_id: str
    state: str
    assignor: str
    coordinator: str
    members: list[MemberInfo]


def _kafka_state_name(name: str) -> str:
    """A --state value as Kafka names the state (case-insensitive, as Kafka's command parses it)."""
    for state in KNOWN_STATES:
        if state.lower() == name.replace("_", "").lower():
            return state
    raise UsageError(f"Invalid state list '{name}'. Valid states are: {', '.join(KNOWN_STATES)}")


# --- parsing helpers --------------------------------------------------------------------------------------


def parse_topic_args(cluster: Cluster, topic_args: Sequence[str]) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for arg in topic_args:
        if ":" in arg:
            topic, _, parts = arg.partition(":")
            if not topic or not parts:
                raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
            for p in parts.split(","):
                try:
                    out.append(TopicPartition(topic, int(p)))
                except ValueError:
                    raise UsageError(f"Invalid partition '{p}' specified in topic arg '{arg}''") from None
        else:
            out.extend(cluster.topic_partitions(arg))
    return out


_DATETIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,3})?(Z|[+-]\d{2}:?\d{2})?$")


def parse_datetime(text: str) -> int:
    """Kafka's Utils.getDateTime: yyyy-MM-ddTHH:mm:SS[.sss][Z|+hh:mm|+hhmm], local time without a zone."""
    m = _DATETIME.match(text.strip())
    if not m:
        raise UsageError(f"Error parsing timestamp '{text}': expected format yyyy-MM-ddTHH:mm:SS.sss")
    base, fraction, zone = m.groups()
    millis = int((fraction or ".0")[1:].ljust(3, "0"))
    moment = dt.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(microsecond=millis * 1000)
    if zone is None:
        moment = moment.astimezone()  # the local time zone, as Kafka does
    elif zone == "Z":
        moment = moment.replace(tzinfo=dt.UTC)
    else:
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        moment = moment.replace(tzinfo=dt.timezone(sign * offset))
    return int(moment.timestamp() * 1000)


_DURATION = re.compile(
    r"^([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:\.\d{1,9})?)S)?)?$",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """java.time.Duration.parse: PnDTnHnMn.nS (days, hours, minutes, seconds; no months or years)."""
    m = _DURATION.match(text.strip())
    if not m or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise UsageError(f"Error parsing duration '{text}': expected ISO-8601 PnDTnHnMnS")
    sign, days, hours, minutes, seconds = m.groups()
    total = (
        int(days or 0) * 86_400_000
        + int(hours or 0) * 3_600_000
        + int(minutes or 0) * 60_000
        + round(float(seconds or 0) * 1000)
    )
    return -total if sign == "-" else total


# --- the actions -----------------------------------------------------------------------------------------


class Command:
    def __init__(self, args: argparse.Namespace, cluster: Cluster, out=sys.stdout, err=sys.stderr) -> None:
        self.args = args
        self.cluster = cluster
        self.out = out
        self.err = err
        self.failed = False

    def print(self, text: str = "") -> None:
        print(text, file=self.out)

    def error(self, message: str) -> None:
        self.failed = True
        print(f"\nError: {message}", file=self.out)

    def group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g for g, _ in self.cluster.list_groups()]
        if not self.args.group:
            raise UsageError("Option --group or --all-groups is required")
        return list(dict.fromkeys(self.args.group))

    # --- --list ---

    def list_groups(self) -> None:
        if self.args.state is None:
            for group_id, _ in self.cluster.list_groups():
                self.print(group_id)
            return
        states = {s.strip() for s in self.args.state.split(",") if s.strip()} if self.args.state else set()
        groups = self.cluster.list_groups(states)
        width = max([15, *(len(g) for g, _ in groups)]) + 10
        self.print(f"{'GROUP':<{width}} {'STATE':<20}".rstrip())
        for group_id, state in groups:
            self.print(f"{group_id:<{width}} {state:<20}".rstrip())

    # --- --describe ---

    def describe(self) -> None:
        infos = self.cluster.describe(self.group_ids())
        for group_id in sorted(infos):
            info = infos[group_id]
            if self.args.members:
                self._describe_members(info)
            elif self.args.state is not None:
                self._describe_state(info)
            else:
                self._describe_offsets(info)

    def _announce_state(self, info: GroupInfo, has_rows: bool) -> bool:
        if info.state == "Dead":
            self.error(f"Consumer group '{info.group_id}' does not exist.")
            return False
        if info.state == "Empty":
            print(f"\nConsumer group '{info.group_id}' has no active members.", file=self.err)
        elif info.state in ACTIVE_STATES and info.state != "Stable":
            print(f"\nWarning: Consumer group '{info.group_id}' is rebalancing.", file=self.err)
        return has_rows

    def _describe_offsets(self, info: GroupInfo) -> None:
        committed = self.cluster.committed(info.group_id)
        rows: list[tuple[TopicPartition | None, str, str, str]] = []
        assigned: set[TopicPartition] = set()
        for m in sorted(info.members, key=lambda m: -len(m.assignment)):
            if not m.assignment:
                continue
            for tp in sorted(m.assignment, key=lambda tp: tp.partition):
                rows.append((tp, m.member_id, m.host, m.client_id))
                assigned.add(tp)
        for tp in sorted(set(committed) - assigned, key=lambda tp: (tp.topic, tp.partition)):
            rows.append((tp, MISSING, MISSING, MISSING))
        if not self._announce_state(info, bool(rows)):
            return
        ends = self.cluster.log_offsets([tp for tp, *_ in rows if tp is not None], "latest")
        table = []
        for tp, consumer, host, client in rows:
            current = committed.get(tp)
            end = ends.get(tp)
            lag = end - current if current is not None and end is not None and end >= 0 else None
            table.append([
                info.group_id, tp.topic, str(tp.partition), _show(current), _show(end), _show(lag),
                consumer, host, client,
            ])  # fmt: skip
        header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]  # fmt: skip
        minimums = [15, 15, 10, 15, 15, 15, 15, 15, 0]
        self._table(header, table, minimums)

    def _describe_members(self, info: GroupInfo) -> None:
        if not self._announce_state(info, True):
            return
        with_instance = any(m.group_instance_id for m in info.members)
        header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + [
            "HOST", "CLIENT-ID", "#PARTITIONS"]  # fmt: skip
        if self.args.verbose:
            header.append("ASSIGNMENT")
        table = []
        for m in info.members:
            row = [info.group_id, m.member_id] + ([m.group_instance_id] if with_instance else [])
            row += [m.host, m.client_id, str(len(m.assignment))]
            if self.args.verbose:
                by_topic: dict[str, list[int]] = {}
                for tp in m.assignment:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                row.append(
                    ", ".join(sorted(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in by_topic.items()))
                    or MISSING
                )
            table.append(row)
        if not table:
            return
        minimums = (
            [15, 15] + ([17] if with_instance else []) + [15, 15, 15] + ([0] if self.args.verbose else [])
        )
        self._table(header, table, minimums)

    def _describe_state(self, info: GroupInfo) -> None:
        if not self._announce_state(info, True):
            return
        width = max(25, len(info.coordinator))
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        row = [info.group_id, info.coordinator, info.assignor or "", info.state, str(len(info.members))]
        self._table(header, [row], [width, 25, 20, 15, 0])

    def _table(self, header: list[str], rows: list[list[str]], minimums: list[int]) -> None:
        widths = [
            max([minimum, len(h), *(len(r[i]) for r in rows)])
            for i, (h, minimum) in enumerate(zip(header, minimums, strict=True))
        ]
        self.print()
        for row in [header, *rows]:
            self.print(" ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())

    # --- --reset-offsets ---

    def reset_offsets(self) -> None:
        a = self.args
        specs = [a.to_earliest, a.to_latest, a.to_current, a.to_offset is not None, a.shift_by is not None,
                 a.to_datetime is not None, a.by_duration is not None, a.from_file is not None]  # fmt: skip
        if sum(bool(s) for s in specs) != 1:
            raise UsageError(
                "Option '[reset-offsets]' requires exactly one of the following scenarios: --to-offset, "
                "--to-earliest, --to-latest, --to-current, --shift-by, --to-datetime, --by-duration, --from-file"
            )
        if a.from_file is None and not a.all_topics and not a.topic:
            raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
        if a.dry_run and a.execute:
            raise UsageError("Option --dry-run and --execute cannot be used together")
        if not a.dry_run and not a.execute:
            print(DRY_RUN_WARNING, file=self.err)
        plan_from_file = self._read_plan(a.from_file) if a.from_file is not None else None
        results: dict[str, dict[TopicPartition, int]] = {}
        group_ids = self.group_ids()
        infos = self.cluster.describe(group_ids)
        for group_id in group_ids:
            state = infos[group_id].state
            if state not in ("Empty", "Dead"):
                self.error(
                    f"Assignments can only be reset if the group '{group_id}' is inactive, but the current state "
                    f"is {state}."
                )
                results[group_id] = {}
                continue
            offsets = self._prepare(group_id, plan_from_file)
            if a.execute and offsets:
                self.cluster.alter_offsets(group_id, offsets)
            results[group_id] = offsets
        if a.export:
            self.out.write(self._export_csv(results))
        else:
            self._print_reset(results)

    def _partitions_to_reset(self, group_id: str) -> list[TopicPartition]:
        if self.args.all_topics:
            return sorted(self.cluster.committed(group_id))
        return parse_topic_args(self.cluster, self.args.topic)

    def _prepare(self, group_id: str, plan_from_file) -> dict[TopicPartition, int]:
        a = self.args
        if plan_from_file is not None:
            plan = plan_from_file.get(group_id)
            if plan is None:
                self.error(f"No reset plan for group {group_id} found")
                return {}
            return self._clamp(plan)
        partitions = self._partitions_to_reset(group_id)
        if a.to_offset is not None:
            return self._clamp(dict.fromkeys(partitions, a.to_offset))
        if a.to_earliest or a.to_latest:
            found = self.cluster.log_offsets(partitions, "earliest" if a.to_earliest else "latest")
            return {tp: found[tp] for tp in partitions}
        if a.shift_by is not None:
            committed = self.cluster.committed(group_id)
            requested = {}
            for tp in partitions:
                if tp not in committed:
                    raise UsageError(
                        f"Cannot shift offset for partition {tp} since there is no current committed offset"
                    )
                requested[tp] = committed[tp] + a.shift_by
            return self._clamp(requested)
        if a.to_datetime is not None or a.by_duration is not None:
            if a.to_datetime is not None:
                timestamp = parse_datetime(a.to_datetime)
            else:
                timestamp = int(dt.datetime.now(dt.UTC).timestamp() * 1000) - parse_duration_ms(a.by_duration)
            found = self.cluster.log_offsets(partitions, "timestamp", timestamp)
            empty = [tp for tp in partitions if found.get(tp, -1) < 0]
            for tp in empty:
                self.print(
                    f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. Falling back to latest known offset."
                )
            latest = self.cluster.log_offsets(empty, "latest")
            return {tp: latest[tp] if tp in latest else found[tp] for tp in partitions}
        # --to-current: the committed offset, or the log end where nothing is committed
        committed = self.cluster.committed(group_id)
        without = [tp for tp in partitions if tp not in committed]
        latest = self.cluster.log_offsets(without, "latest")
        return {tp: committed[tp] if tp in committed else latest[tp] for tp in partitions}

    def _clamp(self, requested: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        starts = self.cluster.log_offsets(requested, "earliest")
        ends = self.cluster.log_offsets(requested, "latest")
        out = {}
        for tp, offset in requested.items():
            if offset > ends[tp]:
                print(f"WARN New offset ({offset}) is higher than latest offset for topic partition {tp}. "
                      f"Value will be set to {ends[tp]}", file=self.err)  # fmt: skip
                offset = ends[tp]
            elif offset < starts[tp]:
                print(f"WARN New offset ({offset}) is lower than earliest offset for topic partition {tp}. "
                      f"Value will be set to {starts[tp]}", file=self.err)  # fmt: skip
                offset = starts[tp]
            out[tp] = offset
        return out

    def _read_plan(self, path: str) -> dict[str, dict[TopicPartition, int]]:
        try:
            with open(path, newline="") as f:
                rows = [r for r in csv.reader(f) if r]
        except OSError as exc:
            raise UsageError(f"Cannot read reset plan {path}: {exc}") from None
        plan: dict[str, dict[TopicPartition, int]] = {}
        single_group = len(self.group_ids()) == 1 if (self.args.group or self.args.all_groups) else False
        for row in rows:
            try:
                if len(row) == 3 and single_group:
                    group, (topic, partition, offset) = self.group_ids()[0], row
                elif len(row) == 4:
                    group, topic, partition, offset = row
                else:
                    raise ValueError
                plan.setdefault(group, {})[TopicPartition(topic, int(partition))] = int(offset)
            except ValueError:
                raise UsageError(f"Invalid line in reset plan {path}: {','.join(row)}") from None
        return plan

    def _export_csv(self, results: dict[str, dict[TopicPartition, int]]) -> str:
        single = len(results) == 1 and not self.args.all_groups
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for group_id, offsets in results.items():
            for tp, offset in sorted(offsets.items()):
                writer.writerow(
                    [tp.topic, tp.partition, offset] if single else [group_id, tp.topic, tp.partition, offset]
                )
        return buf.getvalue()

    def _print_reset(self, results: dict[str, dict[TopicPartition, int]]) -> None:
        rows = [
            [g, tp.topic, str(tp.partition), str(o)]
            for g, offsets in results.items()
            for tp, o in sorted(offsets.items())
        ]
        if rows:
            self._table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [30, 30, 10, 0])
        self.print()

    # --- --delete, --delete-offsets ---

    def delete(self) -> None:
        outcome = self.cluster.delete_groups(self.group_ids())
        failed = {g: e for g, e in outcome.items() if e is not None}
        succeeded = [g for g, e in outcome.items() if e is None]
        if not failed:
            self.print(f"Deletion of requested consumer groups ('{', '.join(succeeded)}') was successful.")
            return
        self.error("Deletion of some consumer groups failed:")
        for group_id, error in failed.items():
            self.print(f"* Group '{group_id}' could not be deleted due to: {error}")
        if succeeded:
            self.print(f"\nThese consumer groups were deleted successfully: '{', '.join(succeeded)}'")

    def delete_offsets(self) -> None:
        if not self.args.group or len(self.args.group) != 1:
            raise UsageError("Option --delete-offsets takes exactly one --group")
        if not self.args.topic:
            raise UsageError("Option --delete-offsets needs --topic")
        group_id = self.args.group[0]
        partitions = parse_topic_args(self.cluster, self.args.topic)
        top, results = self.cluster.delete_offsets(group_id, partitions)
        messages = {
            "NONE": None,
            "INVALID_GROUP_ID": f"'{group_id}' is not valid.",
            "GROUP_ID_NOT_FOUND": f"'{group_id}' does not exist.",
            "GROUP_AUTHORIZATION_FAILED": f"Access to '{group_id}' is not authorized.",
            "NON_EMPTY_GROUP": f"Deleting offsets of a consumer group '{group_id}' is forbidden if the group is not empty.",
        }
        partition_errors = any(e is not None for e in results.values())
        if top == "NONE" and not partition_errors:
            self.print(
                f"Request succeed for deleting offsets with topic {', '.join(self.args.topic)} group {group_id}"
            )
        elif top == "NONE" or top in ("GROUP_SUBSCRIBED_TO_TOPIC", "UNKNOWN_TOPIC_OR_PARTITION"):
            self.error("Encounter some partition level error, see the follow-up details:")
        else:
            self.error(messages.get(top) or f"Encounter some unknown error: {top}")
            results = dict.fromkeys(partitions, top)
        rows = [[tp.topic, str(tp.partition), "Successful" if e is None else f"Error: :{e}"]
                for tp, e in sorted(results.items())]  # fmt: skip
        self._table(["TOPIC", "PARTITION", "STATUS"], rows, [30, 15, 0])


def _show(value: int | None) -> str:
    return MISSING if value is None or value < 0 else str(value)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m broker_runtime.tools.consumer_groups",
        description="List, describe, reset and delete consumer groups (like kafka-consumer-groups).",
    )
    p.add_argument("--bootstrap-server", required=True, help="HOST:PORT of a broker")
    p.add_argument("--command-config", help="a .properties file of client settings")
    p.add_argument("--timeout", type=int, default=5000, help="request timeout in ms (default 5000)")
    actions = p.add_argument_group("actions (exactly one)")
    for name in ("--list", "--describe", "--delete", "--reset-offsets", "--delete-offsets"):
        actions.add_argument(name, action="store_true")
    p.add_argument("--group", action="append", help="a group id (repeatable)")
    p.add_argument("--all-groups", action="store_true")
    p.add_argument("--topic", action="append", help="TOPIC or TOPIC:P,P,... (repeatable)")
    p.add_argument("--all-topics", action="store_true")
    p.add_argument("--state", nargs="?", const="", default=None,
                   help="--list: filter by states (comma-separated); --describe: show the group state")  # fmt: skip
    p.add_argument("--members", action="store_true")
    p.add_argument("--offsets", action="store_true")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-current", action="store_true")
    p.add_argument("--to-offset", type=int)
    p.add_argument("--shift-by", type=int)
    p.add_argument("--to-datetime", help="yyyy-MM-ddTHH:mm:SS.sss[+hh:mm]")
    p.add_argument("--by-duration", help="PnDTnHnMnS")
    p.add_argument(
        "--from-file", help="CSV reset plan: topic,partition,offset (group first for several groups)"
    )
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--execute", action="store_true")
    p.add_argument("--export", action="store_true")
    return p


def main(argv: Sequence[str] | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    actions = {
        "list": "list_groups",
        "describe": "describe",
        "delete": "delete",
        "reset_offsets": "reset_offsets",
        "delete_offsets": "delete_offsets",
    }
    chosen = [method for option, method in actions.items() if getattr(args, option)]
    if len(chosen) != 1:
        parser.print_usage(err)
        print("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
              "--delete-offsets", file=err)  # fmt: skip
        return 1
    cluster = None
    try:
        cluster = Cluster(args.bootstrap_server, args.timeout, load_properties(args.command_config))
        command = Command(args, cluster, out, err)
        getattr(command, chosen[0])()
        return 1 if command.failed else 0
    except UsageError as exc:
        parser.print_usage(err)
        print(str(exc), file=err)
        return 1
    except (CommandError, OSError) as exc:
        print(f"\nError: {exc}", file=out)
        return 1
    except AdminError as exc:
        # What the cluster answered.
        print(f"\nError: Executing consumer group command failed due to {exc}", file=out)
        return 1
    finally:
        if cluster is not None:
            cluster.admin.close()


if __name__ == "__main__":
    sys.exit(run(main))
