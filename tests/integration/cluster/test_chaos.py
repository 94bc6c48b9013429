"""Fault test, Jepsen-style, against real processes: three brokers on a ZooKeeper of the test's own, a topic with
three replicas and `min.insync.replicas=2`, idempotent acks=all producers and a consumer group committing offsets,
while a nemesis kills -9 leaders (and the group's coordinator), pauses a broker past its session timeout and
restarts ZooKeeper (tests/chaos/workload.py). The history is then checked (tests/chaos/history.py): every
acknowledged record read once, in order, no offset with two values, committed offsets never going back.

The short form runs each fault once, in a seeded order. `make chaos` is the long form: CHAOS_SECONDS of random
faults (seed CHAOS_SEED), its result written to CHAOS_RESULT.
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
from pathlib import Path

import pytest

import tests.integration.cluster.conftest as harness
from tests.chaos.history import check
from tests.chaos.workload import FAULTS, Nemesis, Workload

pytestmark = pytest.mark.odradek_only

PARTITIONS = 3


def test_acknowledged_records_and_committed_offsets_survive_kills_pauses_and_zookeeper_restarts(
    zookeeper_factory, helpers, request: pytest.FixtureRequest, topic_name: str
) -> None:
    seconds = float(os.environ.get("CHAOS_SECONDS", "0"))
    seed = int(os.environ.get("CHAOS_SEED", str(random.SystemRandom().randrange(1 << 31))))
    rng = random.Random(seed)
    print(f"chaos seed {seed}")
    zk = zookeeper_factory()
    c = harness.Cluster(
        helpers, zk.data_dir.parent / f"chaos-{topic_name[-8:]}", zk.connect_string("/odradek"), 3,
        {"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3", "min.insync.replicas": "2",
         "replica.lag.time.max.ms": "5000"}, "chaos",
    )  # fmt: skip
    for broker in c.brokers.values():
        helpers.remember_broker(request, broker)
    started = time.monotonic()
    try:
        c.start()
        c.create_topic(topic_name, PARTITIONS, 3)
        c.wait_for_leaders(topic_name, PARTITIONS)
        bootstrap = ",".join(b.bootstrap for b in c.brokers.values())
        group = f"{topic_name}-group"
        workload = Workload(bootstrap, topic_name, PARTITIONS, group)
        nemesis = Nemesis(c, zk, topic_name, PARTITIONS, group, rng)
        workload.start()
        c.wait_for(lambda: len(workload.history.acked) > 100 and workload.history.commits,
                   "records acknowledged and offsets committed before the first fault")  # fmt: skip
        if seconds:
            while time.monotonic() - started < seconds:
                workload.history.faults.append(nemesis.run(rng.choice(FAULTS)))
        else:
            for fault in rng.sample(FAULTS, len(FAULTS)):
                workload.history.faults.append(nemesis.run(fault))
        acked_at_last_fault = len(workload.history.acked)
        c.wait_for(lambda: len(workload.history.acked) > acked_at_last_fault + 100,
                   "producers acknowledged again after the last fault")  # fmt: skip
        workload.stop()
        assert not workload.errors, workload.errors
        workload.read_all()
        h = workload.history
        verdict = check(h.acked, h.observed, h.final, h.commits)
    finally:
        c.stop()
        zk.stop()
    result = {
        "seed": seed, "seconds": round(time.monotonic() - started, 1), "faults": h.faults, "valid": verdict.valid,
        "problems": verdict.problems, "stats": verdict.stats, "machine": platform.node(),
        "load_average": os.getloadavg(),
    }  # fmt: skip
    if os.environ.get("CHAOS_RESULT"):
        Path(os.environ["CHAOS_RESULT"]).write_text(json.dumps(result, indent=2) + "\n")
    assert verdict.valid, json.dumps(result, indent=2)
    assert verdict.stats["acked"] > 200 and verdict.stats["commits"] > 0
