"""Celery tasks about topics."""

from __future__ import annotations

import time

from celery import shared_task

from console.clusters.client import client_for
from console.errors import Conflict
from console.operations import runner
from console.operations.models import Operation

#: How long a new topic may take to get a leader and a full ISR on every partition.
READY_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.2


def _create_topic(operation: Operation) -> dict:
    params = operation.params
    name, partitions, replication = params["name"], params["partitions"], params["replication_factor"]
    client = client_for(operation.cluster)
    if not operation.has_step("created"):
        try:
            client.create_topic(name, partitions, replication, params.get("configs", {}), validate_only=False)
            operation.record_step(
                "created", f"{partitions} partitions, replication factor {replication}", progress=10
            )
        except Conflict:
            # Resumed after a worker died between creating the topic and recording it, or created meanwhile
            # by someone else: either way, wait for it below.
            operation.record_step("created", "the topic already existed", progress=10)
    deadline = time.monotonic() + READY_TIMEOUT_S
    last_ready = -1
    while True:
        topic = client.metadata(max_age_s=0).topics.get(name)
        parts = topic.partitions if topic else ()
        ready = sum(1 for p in parts if p.leader >= 0 and set(p.isr) == set(p.replicas) and p.replicas)
        if ready != last_ready:
            operation.record_step(
                "waiting",
                f"{ready} of {partitions} partitions have a leader and a full ISR",
                progress=10 + 90 * ready // partitions,
            )
            last_ready = ready
        if topic is not None and ready == partitions == len(parts):
            return {
                "partitions": partitions,
                "replication_factor": replication,
                "leaders": {p.partition: p.leader for p in parts},
            }
        if time.monotonic() > deadline:
            raise runner.OperationFailed(
                f"after {READY_TIMEOUT_S:.0f} s only {ready} of {partitions} partitions have a leader and a full ISR"
            )
        time.sleep(POLL_INTERVAL_S)


@shared_task(ignore_result=True, acks_late=True)
def create_topic(operation_id: int) -> None:
    runner.run(operation_id, _create_topic, audit_action="topic.create")
