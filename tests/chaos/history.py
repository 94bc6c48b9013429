"""The checker of a fault-test history (Jepsen-style): pure, no I/O, no clients.

A history is what the clients of one run saw, in the order they saw it:
- `acked`: records a producer had acknowledged, with the offset the broker gave them;
- `observed`: every record a consumer received during the run (redeliveries included);
- `final`: one read of every partition from its start to its high watermark after the run;
- `commits`: committed group offsets, as acknowledged to the committing consumer or read back from the group,
  each with the interval of its request.

Values are unique per record and carry their producer and sequence number (`value_of`), so that order within
a producer's partition can be checked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class Commit:
    """A committed offset as a client saw it, over the interval [start, end] of its request (monotonic time)."""

    partition: int
    offset: int
    source: str  # "ack": a successful OffsetCommit; "read": an OffsetFetch of the group
    start: float = 0.0
    end: float = 0.0


def value_of(producer: str, sequence: int) -> str:
    return f"{producer}:{sequence}"


def parse_value(value: str) -> tuple[str, int]:
    producer, _, sequence = value.rpartition(":")
    return producer, int(sequence)


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.problems

    def add(self, kind: str, detail: str, limit: int = 20) -> None:
        """Keep the first few problems of each kind readable; count them all."""
        count = self.stats.get(f"problem:{kind}", 0)
        self.stats[f"problem:{kind}"] = count + 1
        if count < limit:
            self.problems.append(f"{kind}: {detail}")


def check(
    acked: Iterable[Record], observed: Iterable[Record], final: Iterable[Record], commits: Iterable[Commit]
) -> Verdict:
    acked, observed, final, commits = list(acked), list(observed), list(final), list(commits)
    verdict = Verdict(stats={"acked": len(acked), "observed": len(observed), "final": len(final),
                             "commits": len(commits)})  # fmt: skip

    # No offset ever held two different values, across everything anyone saw (and what producers were told).
    at_offset: dict[tuple[int, int], str] = {}
    for source, records in (("final", final), ("observed", observed), ("acked", acked)):
        for r in records:
            seen = at_offset.setdefault((r.partition, r.offset), r.value)
            if seen != r.value:
                verdict.add("offset with two values", f"{r.partition}@{r.offset} held {seen!r} and {r.value!r} "
                            f"({source})")  # fmt: skip

    # The final read: every value once, every acknowledged record in it (lost otherwise).
    final_count: dict[str, int] = defaultdict(int)
    for r in final:
        final_count[r.value] += 1
    for value, count in final_count.items():
        if count > 1:
            verdict.add("duplicate", f"{value!r} read {count} times")
    for r in acked:
        if r.value not in final_count:
            verdict.add("lost", f"acknowledged {r.value!r} at {r.partition}@{r.offset} not read")

    # Order: within a partition, each producer's records in the order it sent them.
    for source, records in (("final", final), ("observed", observed)):
        last: dict[tuple[int, str], tuple[int, int]] = {}
        for r in sorted(set(records), key=lambda r: (r.partition, r.offset)):
            producer, sequence = parse_value(r.value)
            previous = last.get((r.partition, producer))
            if previous is not None and previous[1] >= sequence:
                verdict.add("order", f"{source}: {producer} #{sequence} at {r.partition}@{r.offset} after "
                            f"#{previous[1]} at {r.partition}@{previous[0]}")  # fmt: skip
            last[(r.partition, producer)] = (r.offset, sequence)

    # Committed group offsets never go backwards: a read-back never shows less than what a commit acknowledged,
    # or another read answered, before the read was sent. (Overlapping requests may see either order.)
    highest: dict[int, int] = {}
    by_end = sorted(commits, key=lambda c: c.end)
    done = 0
    for read in sorted((c for c in commits if c.source == "read"), key=lambda c: c.start):
        while done < len(by_end) and by_end[done].end < read.start:
            earlier = by_end[done]
            highest[earlier.partition] = max(highest.get(earlier.partition, -1), earlier.offset)
            done += 1
        if read.offset < highest.get(read.partition, -1):
            verdict.add("commit went back", f"partition {read.partition}: read {read.offset} after "
                        f"{highest[read.partition]}")  # fmt: skip
    for c in commits:
        highest[c.partition] = max(highest.get(c.partition, -1), c.offset)
    end = defaultdict(int)
    for r in final:
        end[r.partition] = max(end[r.partition], r.offset + 1)
    for partition, offset in highest.items():
        if offset > end[partition]:
            verdict.add("commit past the log", f"partition {partition}: committed {offset}, log ends at "
                        f"{end[partition]}")  # fmt: skip
    return verdict
