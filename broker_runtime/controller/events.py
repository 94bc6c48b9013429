"""The controller's events: everything that can change what the controller must do arrives as one of these on
its queue (ZooKeeper watches, session changes, requests from brokers and admin clients, responses from brokers,
timers), and one task processes them in order."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.controller.context import TopicPartition


@dataclass
class Event:
    pass


@dataclass
class Startup(Event):
    pass


@dataclass
class ControllerChange(Event):
    """/controller changed (or vanished): resign if it is not us any more, elect if there is none."""


@dataclass
class Expire(Event):
    """Our ZooKeeper session expired: stop acting as controller at once."""


@dataclass
class RegisterBrokerAndReelect(Event):
    """A new ZooKeeper session: register the broker again, then take part in the election."""


@dataclass
class BrokerChange(Event):
    pass


@dataclass
class BrokerModification(Event):
    broker_id: int


@dataclass
class TopicChange(Event):
    pass


@dataclass
class PartitionModifications(Event):
    topic: str


@dataclass
class TopicDeletion(Event):
    pass


@dataclass
class ZkPartitionReassignment(Event):
    pass


@dataclass
class ZkPreferredReplicaElection(Event):
    pass


@dataclass
class IsrChangeNotification(Event):
    pass


@dataclass
class AutoPreferredReplicaLeaderElection(Event):
    pass


@dataclass
class UncleanLeaderElectionEnable(Event):
    topic: str | None  # None: the broker-wide default was enabled


@dataclass
class ResponseReceived(Event):
    broker_id: int
    request: Any
    response: Any


@dataclass
class ApiEvent(Event):
    """An event answering a request: `reply` completes with the result (or an exception)."""

    reply: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass
class ControlledShutdown(ApiEvent):
    broker_id: int = -1
    broker_epoch: int = -1


@dataclass
class AlterPartitionReceived(ApiEvent):
    request: Any = None


@dataclass
class ReplicaLeaderElection(ApiEvent):
    partitions: set[TopicPartition] | None = None  # None: every partition (admin "all")
    election_type: int = 0  # 0 preferred, 1 unclean (Kafka's ElectionType)


@dataclass
class ApiPartitionReassignment(ApiEvent):
    reassignments: dict[TopicPartition, tuple[int, ...] | None] = field(default_factory=dict)  # None: cancel


@dataclass
class ListPartitionReassignments(ApiEvent):
    partitions: set[TopicPartition] | None = None
