"""Every advertised version of every group API, spoken raw (kio-encoded) to the broker: one complete member
lifecycle per JoinGroup version, then the admin APIs. Clients only ever use a few of these versions; this is
what keeps the others honest."""

from __future__ import annotations

import dataclasses
import datetime
import time
import uuid

import pytest
from group_harness import (
    group_broker_fixture,  # noqa: F401  (fixture "group_broker")
    group_broker_process_fixture,  # noqa: F401  (fixture)
    produce_spread,
)
from kio.index import load_entity_module, load_request_schema
from kio.schema.errors import ErrorCode as E
from kio.static.constants import EntityType

from broker_runtime.handlers.groups import GROUP_API_VERSIONS
from broker_runtime.protocol.apis import ApiKey

SUBSCRIPTION = bytes.fromhex("000000000001000174ffffffff")  # v0: topics ["t"], no user data


def build(api: str, api_key: int, version: int, **values):
    """A request of `version`, keeping only the fields that version has (nested: pass builders)."""
    cls = load_request_schema(api_key, version)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v(version) if callable(v) else v for k, v in values.items() if k in names})


def nested(api: str, version: int, cls_name: str, **values):
    module = load_entity_module(api, version, EntityType.request)
    cls = getattr(module, cls_name)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def ms(n: int):
    from kio.static.primitive import i32Timedelta

    return i32Timedelta.parse(datetime.timedelta(milliseconds=n))


def versions(api_key: int) -> range:
    low, high = GROUP_API_VERSIONS[api_key]
    return range(low, high + 1)


@pytest.fixture
def raw_client(group_broker, raw):
    with raw.RawClient.to(group_broker, timeout=30) as client:
        yield client


def join(client, group: str, version: int, member_id: str = ""):
    protocol = nested("join_group", version, "JoinGroupRequestProtocol", name="range", metadata=SUBSCRIPTION)
    return client.call(build(
        "join_group", ApiKey.JOIN_GROUP, version, group_id=group, session_timeout=ms(10000),
        rebalance_timeout=ms(10000), member_id=member_id, group_instance_id=None, protocol_type="consumer",
        protocols=(protocol,), reason=None,
    ))  # fmt: skip


@pytest.mark.parametrize("join_version", list(versions(ApiKey.JOIN_GROUP)))
def test_a_member_lifecycle_in_every_join_group_version(
    join_version, raw_client, group_broker, new_topic
) -> None:
    c = raw_client
    topic = new_topic(1, broker=group_broker)
    produce_spread(group_broker.bootstrap, topic, 1, 3)
    group = f"v{join_version}-{uuid.uuid4().hex[:8]}"
    # FindCoordinator in the version that matches the era of this JoinGroup (creates __consumer_offsets if needed).
    fc_version = min(join_version, GROUP_API_VERSIONS[ApiKey.FIND_COORDINATOR][1])
    deadline = time.monotonic() + 30  # __consumer_offsets is created in the background meanwhile
    while True:
        found = c.call(build("find_coordinator", ApiKey.FIND_COORDINATOR, fc_version, key=group, key_type=0,
                             coordinator_keys=(group,)))  # fmt: skip
        error = found.coordinators[0].error_code if fc_version >= 4 else found.error_code
        if error == E.none:
            break
        assert error == E.coordinator_not_available and time.monotonic() < deadline
        time.sleep(0.05)

    joined = join(c, group, join_version)
    if join_version >= 4:  # KIP-394: the coordinator hands out the member id first
        assert joined.error_code == E.member_id_required and joined.member_id
        joined = join(c, group, join_version, joined.member_id)
    assert joined.error_code == E.none, joined
    member_id, generation = joined.member_id, joined.generation_id
    assert (generation, joined.leader, joined.protocol_name) == (1, member_id, "range")
    assert [m.member_id for m in joined.members] == [member_id]
    if join_version >= 7:
        assert joined.protocol_type == "consumer"

    sync_version = min(join_version, GROUP_API_VERSIONS[ApiKey.SYNC_GROUP][1])
    assignment = nested("sync_group", sync_version, "SyncGroupRequestAssignment", member_id=member_id,
                        assignment=b"my-assignment")  # fmt: skip
    synced = c.call(build(
        "sync_group", ApiKey.SYNC_GROUP, sync_version, group_id=group, generation_id=generation,
        member_id=member_id, group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=(assignment,),
    ))  # fmt: skip
    assert (synced.error_code, bytes(synced.assignment)) == (E.none, b"my-assignment")

    hb_version = min(join_version, GROUP_API_VERSIONS[ApiKey.HEARTBEAT][1])
    beat = c.call(build("heartbeat", ApiKey.HEARTBEAT, hb_version, group_id=group, generation_id=generation,
                        member_id=member_id, group_instance_id=None))  # fmt: skip
    assert beat.error_code == E.none

    for commit_version in versions(ApiKey.OFFSET_COMMIT):
        from kio.static.primitive import i64Timedelta

        partition = nested("offset_commit", commit_version, "OffsetCommitRequestPartition", partition_index=0,
                           committed_offset=commit_version, committed_leader_epoch=-1,
                           committed_metadata=f"v{commit_version}")  # fmt: skip
        commit_topic = nested("offset_commit", commit_version, "OffsetCommitRequestTopic", name=topic,
                              partitions=(partition,))  # fmt: skip
        committed = c.call(build(
            "offset_commit", ApiKey.OFFSET_COMMIT, commit_version, group_id=group,
            generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
            retention_time=i64Timedelta.parse(datetime.timedelta(milliseconds=-1)), topics=(commit_topic,),
        ))  # fmt: skip
        assert committed.topics[0].partitions[0].error_code == E.none, (commit_version, committed)

        for fetch_version in versions(ApiKey.OFFSET_FETCH):
            if fetch_version >= 8:
                wanted = nested("offset_fetch", fetch_version, "OffsetFetchRequestTopics", name=topic,
                                partition_indexes=(0,))  # fmt: skip
                g = nested(
                    "offset_fetch", fetch_version, "OffsetFetchRequestGroup", group_id=group, topics=(wanted,)
                )
                fetched = c.call(build("offset_fetch", ApiKey.OFFSET_FETCH, fetch_version, groups=(g,),
                                       require_stable=True))  # fmt: skip
                (fg,) = fetched.groups
                assert fg.error_code == E.none
                part = fg.topics[0].partitions[0]
            else:
                wanted = nested("offset_fetch", fetch_version, "OffsetFetchRequestTopic", name=topic,
                                partition_indexes=(0,))  # fmt: skip
                fetched = c.call(build("offset_fetch", ApiKey.OFFSET_FETCH, fetch_version, group_id=group,
                                       topics=(wanted,), require_stable=False))  # fmt: skip
                part = fetched.topics[0].partitions[0]
            assert (part.error_code, part.committed_offset, part.metadata) == (
                E.none, commit_version, f"v{commit_version}"
            ), (commit_version, fetch_version)  # fmt: skip

    all_offsets = c.call(build("offset_fetch", ApiKey.OFFSET_FETCH, 2, group_id=group, topics=None))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in all_offsets.topics] == [(topic, [0])]

    leave_version = min(join_version, GROUP_API_VERSIONS[ApiKey.LEAVE_GROUP][1])
    if leave_version >= 3:
        identity = nested(
            "leave_group", leave_version, "MemberIdentity", member_id=member_id, group_instance_id=None
        )
        left = c.call(
            build("leave_group", ApiKey.LEAVE_GROUP, leave_version, group_id=group, members=(identity,))
        )
        assert [m.error_code for m in left.members] == [E.none]
    else:
        left = c.call(
            build("leave_group", ApiKey.LEAVE_GROUP, leave_version, group_id=group, member_id=member_id)
        )
    assert left.error_code == E.none
    # The last member left: the group is Empty and still holds its offsets.
    described = c.call(build("describe_groups", ApiKey.DESCRIBE_GROUPS, min(join_version, 5), groups=(group,),
                             include_authorized_operations=False))  # fmt: skip
    assert (described.groups[0].group_state, described.groups[0].members) == ("Empty", ())


def test_admin_apis_in_every_version(raw_client, group_broker, new_topic) -> None:
    c = raw_client
    topic = new_topic(1, broker=group_broker)
    produce_spread(group_broker.bootstrap, topic, 1, 3)
    groups = [f"adm-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    for g in groups:  # offsets-only groups (generation -1 commits), Empty
        partition = nested("offset_commit", 8, "OffsetCommitRequestPartition", partition_index=0,
                           committed_offset=1, committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
        commit_topic = nested(
            "offset_commit", 8, "OffsetCommitRequestTopic", name=topic, partitions=(partition,)
        )
        resp = c.call(build("offset_commit", ApiKey.OFFSET_COMMIT, 8, group_id=g, generation_id_or_member_epoch=-1,
                            member_id="", group_instance_id=None, topics=(commit_topic,)))  # fmt: skip
        assert resp.topics[0].partitions[0].error_code == E.none

    for v in versions(ApiKey.DESCRIBE_GROUPS):
        described = c.call(build("describe_groups", ApiKey.DESCRIBE_GROUPS, v, groups=(groups[0], "nobody"),
                                 include_authorized_operations=True))  # fmt: skip
        assert [(g.group_id, g.error_code, g.group_state) for g in described.groups] == [
            (groups[0], E.none, "Empty"), ("nobody", E.none, "Dead")
        ]  # fmt: skip
        if v >= 3:
            assert described.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)

    for v in versions(ApiKey.LIST_GROUPS):
        listed = c.call(build("list_groups", ApiKey.LIST_GROUPS, v, states_filter=("Empty",)))
        assert listed.error_code == E.none
        assert set(groups) <= {g.group_id for g in listed.groups}
        if v >= 4:
            assert {g.group_state for g in listed.groups if g.group_id in groups} == {"Empty"}
            stable_only = c.call(build("list_groups", ApiKey.LIST_GROUPS, v, states_filter=("Stable",)))
            assert not set(groups) & {g.group_id for g in stable_only.groups}

    od = nested("offset_delete", 0, "OffsetDeleteRequestTopic", name=topic,
                partitions=(nested("offset_delete", 0, "OffsetDeleteRequestPartition", partition_index=0),))  # fmt: skip
    deleted_offsets = c.call(
        build("offset_delete", ApiKey.OFFSET_DELETE, 0, group_id=groups[3], topics=(od,))
    )
    assert deleted_offsets.error_code == E.none
    assert deleted_offsets.topics[0].partitions[0].error_code == E.none

    for v, g in zip(versions(ApiKey.DELETE_GROUPS), groups, strict=False):
        deleted = c.call(build("delete_groups", ApiKey.DELETE_GROUPS, v, groups_names=(g, "nobody")))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (g, E.none),
            ("nobody", E.group_id_not_found),
        ]
