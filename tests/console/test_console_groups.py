"""Consumer-group pages, offset resets with a preview and group deletion, through the pages and the API,
with real confluent-kafka consumers as the group's members."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from console.audit.models import AuditEntry, Outcome
from console.clusters.client import client_for
from console.groups.models import GroupLag
from console.groups.tasks import refresh_all_lag
from tests.console.conftest import wait_for


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for a group with no members left (assign + commit + close)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


@pytest.fixture
def lagging_group(cluster, shared_broker, new_topic):
    """A topic with 10 records in each of 2 partitions and an empty group that committed 4 and 10."""
    name = new_topic(partitions=2)
    producer = client_for(cluster).producer()
    for p in (0, 1):
        for i in range(10):
            producer.produce(name, value=f"{p}-{i}".encode(), partition=p)
    producer.flush(10)
    group = f"g-{uuid.uuid4().hex[:8]}"
    commit(shared_broker.bootstrap, group, {(name, 0): 4, (name, 1): 10})
    return name, group


@pytest.fixture
def active_member(shared_broker):
    """start(topic, group): a subscribed consumer that stays in the group until the test ends."""
    consumers = []

    def start(topic: str, group: str) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": shared_broker.bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "session.timeout.ms": 10000,
            }
        )
        consumer.subscribe([topic])
        consumers.append(consumer)
        wait_for(lambda: (consumer.poll(0.2), consumer.assignment())[1], timeout=30, what="assignment")
        return consumer

    yield start
    for consumer in consumers:
        consumer.close()


def test_group_list_and_detail_show_lag(client, personas, cluster, lagging_group):
    topic, group = lagging_group
    client.force_login(personas["victor"])
    listing = client.get(f"/clusters/{cluster.pk}/groups/", {"q": group})
    [row] = listing.context["page_obj"].object_list
    assert (row.group_id, row.state, row.members, row.lag, row.partitions) == (group, "EMPTY", 0, 6, 2)
    detail = client.get(f"/clusters/{cluster.pk}/groups/{group}/")
    assert [(r.topic, r.partition, r.committed, r.end, r.lag) for r in detail.context["rows"]] == [
        (topic, 0, 4, 10, 6),
        (topic, 1, 10, 10, 0),
    ]
    assert detail.context["total_lag"] == 6
    assert client.get(f"/clusters/{cluster.pk}/groups/no-such-group/").status_code == 404


def test_group_list_sorts_by_lag_from_the_refreshed_table(
    client, personas, cluster, shared_broker, lagging_group
):
    topic, big = lagging_group
    small = big + "-small"
    commit(shared_broker.bootstrap, small, {(topic, 0): 9})
    assert refresh_all_lag() >= 2
    assert dict(GroupLag.objects.filter(group_id__in=[big, small]).values_list("group_id", "lag")) == {
        big: 6,
        small: 1,
    }
    client.force_login(personas["victor"])

    def ids(sort):
        return [
            r.group_id
            for r in client.get(f"/clusters/{cluster.pk}/groups/", {"q": big, "sort": sort}).context[
                "page_obj"
            ]
        ]

    assert ids("-lag") == [big, small]
    assert ids("lag") == [small, big]


def test_reset_preview_then_apply(client, personas, cluster, lagging_group):
    topic, group = lagging_group
    client.force_login(personas["oscar"])
    url = f"/clusters/{cluster.pk}/groups/{group}/reset-offsets/"
    preview = client.post(url, {"to": "shift", "value": "-2", "topic": "", "execute": "0"})
    assert [(r.partition, r.current, r.new, r.lag_after) for r in preview.context["preview"]] == [
        (0, 4, 2, 8),
        (1, 10, 8, 2),
    ]
    assert client_for(cluster).committed_offsets([group])[group] == {
        (topic, 0): 4,
        (topic, 1): 10,
    }  # nothing changed
    assert not AuditEntry.objects.filter(action="group.reset_offsets").exists()
    applied = client.post(url, {"to": "shift", "value": "-2", "topic": "", "execute": "1"})
    assert applied.status_code == 302
    assert client_for(cluster).committed_offsets([group])[group] == {(topic, 0): 2, (topic, 1): 8}
    entry = AuditEntry.objects.get(action="group.reset_offsets")
    assert entry.outcome == Outcome.OK and entry.params == {"to": "shift", "value": -2}
    assert f"{topic}-0: 4 -> 2" in entry.detail


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"to": "earliest"}, {0: 0, 1: 0}),
        ({"to": "latest"}, {0: 10, 1: 10}),
        ({"to": "offset", "value": 7}, {0: 7, 1: 7}),
        ({"to": "offset", "value": 99}, {0: 10, 1: 10}),  # clamped to the end
        ({"to": "shift", "value": -50}, {0: 0, 1: 0}),  # clamped to the start
        ({"to": "timestamp", "value": 0}, {0: 0, 1: 0}),
        ({"to": "timestamp", "value": 4102444800000}, {0: 10, 1: 10}),  # after every record: the end
    ],
)
def test_api_reset_targets(api, cluster, lagging_group, body, expected):
    topic, group = lagging_group
    url = f"/api/v1/clusters/{cluster.pk}/groups/{group}/reset-offsets/"
    preview = api("oscar").post(url, {**body, "topic": topic}, format="json")
    assert preview.status_code == 200, preview.json()
    assert preview.json()["dry_run"] is True
    assert {r["partition"]: r["new"] for r in preview.json()["partitions"]} == expected
    applied = api("oscar").post(url, {**body, "topic": topic, "dry_run": False}, format="json")
    assert applied.status_code == 200
    committed = client_for(cluster).committed_offsets([group])[group]
    assert {p: o for (_, p), o in committed.items()} == expected


def test_reset_and_delete_are_refused_while_members_are_active(api, cluster, lagging_group, active_member):
    topic, group = lagging_group
    active_member(topic, group)
    base = f"/api/v1/clusters/{cluster.pk}/groups/{group}/"
    detail = api("victor").get(base).json()
    assert detail["state"] == "STABLE" and len(detail["members"]) == 1
    assert {(a["topic"], a["partition"]) for a in detail["members"][0]["assignment"]} == {
        (topic, 0),
        (topic, 1),
    }
    reset = api("oscar").post(base + "reset-offsets/", {"to": "earliest", "dry_run": False}, format="json")
    assert reset.status_code == 409 and "active member" in reset.json()["detail"]
    delete = api("alice").delete(base)
    assert delete.status_code == 409
    assert client_for(cluster).committed_offsets([group])[group] == {(topic, 0): 4, (topic, 1): 10}
    outcomes = set(AuditEntry.objects.filter(resource_name=group).values_list("outcome", flat=True))
    assert outcomes == {Outcome.INVALID}


def test_api_reset_validation(api, cluster, lagging_group):
    topic, group = lagging_group
    url = f"/api/v1/clusters/{cluster.pk}/groups/{group}/reset-offsets/"
    assert list(api("oscar").post(url, {"to": "yesterday"}, format="json").json()) == ["to"]
    assert list(api("oscar").post(url, {"to": "offset"}, format="json").json()) == ["value"]
    unknown = api("oscar").post(url, {"to": "earliest", "topic": topic, "partitions": [5]}, format="json")
    assert unknown.status_code == 400 and list(unknown.json()) == ["partitions"]
    assert api("victor").post(url, {"to": "earliest"}, format="json").status_code == 403


def test_api_group_list_detail_and_delete(api, cluster, lagging_group):
    topic, group = lagging_group
    listing = api("victor").get(f"/api/v1/clusters/{cluster.pk}/groups/", {"q": group}).json()
    assert listing["results"] == [
        {"group_id": group, "state": "EMPTY", "members": 0, "lag": 6, "partitions": 2}
    ]
    detail = api("victor").get(f"/api/v1/clusters/{cluster.pk}/groups/{group}/").json()
    assert detail["lag"] == 6
    assert detail["partitions"][0] == {
        "topic": topic,
        "partition": 0,
        "committed": 4,
        "end": 10,
        "lag": 6,
        "member": "",
        "client_id": "",
        "host": "",
    }
    assert api("oscar").delete(f"/api/v1/clusters/{cluster.pk}/groups/{group}/").status_code == 403
    assert api("alice").delete(f"/api/v1/clusters/{cluster.pk}/groups/{group}/").status_code == 204
    assert api("victor").get(f"/api/v1/clusters/{cluster.pk}/groups/{group}/").status_code == 404
