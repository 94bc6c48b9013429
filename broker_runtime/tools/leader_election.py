"""`python -m broker_runtime.tools.leader_election`: Kafka's kafka-leader-election over the Kafka protocol
(ElectLeaders, sent to the controller), with its flags and output.

    --bootstrap-server HOST:PORT --election-type preferred|unclean
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)

The JSON file: {"partitions":[{"topic":"foo","partition":1},{"topic":"foobar","partition":2}]}. A preferred
election moves leadership to the first replica where it is in sync; an unclean one elects a leader, in sync or
not, where there is none.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from broker_runtime.tools import run
from broker_runtime.tools.admin_client import AdminClient, AdminError, load_properties

ELECTION_TYPES = {"preferred": 0, "unclean": 1}


class CommandError(Exception):
    pass


def parse_partitions(path: str) -> list[tuple[str, int]]:
    try:
        with open(path) as f:
            data = json.load(f)
        partitions = [(str(e["topic"]), int(e["partition"])) for e in data["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"Replica election data is not valid in {path}: {exc!r}") from None
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise CommandError("Replica election data contains duplicate partitions: "
                           + ",".join(f"{t}-{p}" for t, p in duplicates))  # fmt: skip
    return partitions


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m broker_runtime.tools.leader_election",
        description="Attempts to elect a new leader for a set of topic partitions (Kafka's kafka-leader-election).",
    )
    p.add_argument("--bootstrap-server")
    p.add_argument("--admin.config", "--admin-config", dest="admin_config")
    p.add_argument("--election-type", type=str.lower, choices=sorted(ELECTION_TYPES))
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--all-topic-partitions", action="store_true")
    p.add_argument("--path-to-json-file")
    return p


def validate(args: argparse.Namespace) -> None:
    missing = [o for o, v in (("--bootstrap-server", args.bootstrap_server), ("--election-type", args.election_type))
               if not v]  # fmt: skip
    if missing:
        raise CommandError("Missing required option(s): " + ", ".join(missing))
    chosen = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise CommandError("One and only one of the following options is required: --topic, "
                           "--all-topic-partitions, --path-to-json-file")  # fmt: skip
    if args.topic is not None and args.partition is None:
        raise CommandError("Missing required option(s): --partition")
    if args.topic is None and args.partition is not None:
        raise CommandError("Option --partition is only allowed if --topic is used")


def main(argv: Sequence[str] | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        validate(args)
    except CommandError as exc:
        print(str(exc), file=err)
        return 1
    kind = args.election_type.upper()
    try:
        partitions = None
        if args.topic is not None:
            partitions = [(args.topic, args.partition)]
        elif args.path_to_json_file:
            partitions = parse_partitions(args.path_to_json_file)
        props = load_properties(args.admin_config)
        timeout_ms = int(props.get("request.timeout.ms", "30000"))
        with AdminClient(
            args.bootstrap_server, client_id="odradek-leader-election", timeout_ms=timeout_ms
        ) as admin:
            results = admin.elect_leaders(ELECTION_TYPES[args.election_type], partitions)
    except (CommandError, AdminError, OSError) as exc:
        print(f"Error: {exc}", file=err)
        return 1
    succeeded = sorted(tp for tp, (code, _) in results.items() if code == ErrorCode.none)
    noop = sorted(tp for tp, (code, _) in results.items() if code == ErrorCode.election_not_needed)
    failed = sorted(
        (tp, code, message)
        for tp, (code, message) in results.items()
        if code not in (ErrorCode.none, ErrorCode.election_not_needed)
    )
    if succeeded:
        print(f"Successfully completed leader election ({kind}) for partitions "
              + ", ".join(f"{t}-{p}" for t, p in succeeded), file=out)  # fmt: skip
    if noop:
        print(
            "Valid replica already elected for partitions " + ", ".join(f"{t}-{p}" for t, p in noop), file=out
        )
    for (t, p), code, message in failed:
        print(f"Error completing leader election ({kind}) for partition: {t}-{p}: {code.name.upper()}"
              + (f": {message}" if message else ""), file=out)  # fmt: skip
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
