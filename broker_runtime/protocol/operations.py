"""Authorized operations (KIP-430): Kafka's ACL operation codes and, per resource type, the operations it
supports. Without an authorizer Kafka grants every supported operation, and Odradek has none, so a response's
authorized-operations field is the full bitfield of the resource type (bit n set = operation with code n)."""

from __future__ import annotations

import enum


class AclOperation(enum.IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


# A response field that was not asked for (the schema default, Integer.MIN_VALUE).
OMITTED = -(2**31)

_A = AclOperation
_SUPPORTED = {
    "topic": (_A.READ, _A.WRITE, _A.CREATE, _A.DESCRIBE, _A.DELETE, _A.ALTER, _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS),
    "group": (_A.READ, _A.DESCRIBE, _A.DELETE),
    "cluster": (
        _A.CREATE, _A.CLUSTER_ACTION, _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS, _A.IDEMPOTENT_WRITE, _A.ALTER, _A.DESCRIBE,
    ),
}  # fmt: skip


def _bits(operations) -> int:
    return sum(1 << op for op in operations)


TOPIC_OPERATIONS = _bits(_SUPPORTED["topic"])
GROUP_OPERATIONS = _bits(_SUPPORTED["group"])
CLUSTER_OPERATIONS = _bits(_SUPPORTED["cluster"])
