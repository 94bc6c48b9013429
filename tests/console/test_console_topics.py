"""Topic pages, actions and /api/v1/.../topics/ against the shared broker (pytest-django, no worker: topic
creation's task is covered in test_console_worker.py)."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEntry, Outcome
from console.clusters.client import client_for
from console.errors import Conflict, Invalid
from console.topics import actions


@pytest.fixture
def victor_client(client, personas):
    client.force_login(personas["victor"])
    return client


def test_topic_list_searches_sorts_and_pages_on_the_server(client, personas, cluster, new_topic, topic_name):
    for i in range(3):
        new_topic(partitions=i + 1, name=f"{topic_name}-{i}")
    client.force_login(personas["victor"])
    page = client.get(f"/clusters/{cluster.pk}/topics/", {"q": topic_name, "sort": "-partitions"})
    rows = page.context["rows"]
    assert [r.name for r in rows] == [f"{topic_name}-2", f"{topic_name}-1", f"{topic_name}-0"]
    assert [r.partitions for r in rows] == [3, 2, 1]
    assert all(r.messages == 0 and r.size_bytes == 0 for r in rows)
    # internal topics only on request
    names = {r.name for r in client.get(f"/clusters/{cluster.pk}/topics/", {"q": "__"}).context["rows"]}
    assert not names
    fragment = client.get(
        f"/clusters/{cluster.pk}/topics/", {"q": topic_name}, headers={"HX-Request": "true"}
    )
    assert b"<html" not in fragment.content and b"topics-table" in fragment.content


def test_topic_list_paginates(victor_client, cluster, new_topic, topic_name):
    for i in range(27):
        new_topic(name=f"{topic_name}-{i:02d}")
    first = victor_client.get(f"/clusters/{cluster.pk}/topics/", {"q": topic_name})
    assert len(first.context["rows"]) == 25 and first.context["page_obj"].paginator.count == 27
    second = victor_client.get(f"/clusters/{cluster.pk}/topics/", {"q": topic_name, "page": 2})
    assert [r.name for r in second.context["rows"]] == [f"{topic_name}-25", f"{topic_name}-26"]


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"name": "bad name!"}, "name", "may contain only"),
        ({"name": "a" * 250}, "name", "at most 249"),
        ({"partitions": 0}, "partitions", "between 1 and"),
        ({"replication_factor": 2}, "replication_factor", "number of brokers (1)"),
        ({"configs": {"retention.ms": "soon"}}, "configs", ""),
        ({"configs": {"no.such.config": "1"}}, "configs", ""),
    ],
)
def test_create_topic_is_validated_before_anything_is_created(cluster, topic_name, params, field, message):
    request = {"name": topic_name, "partitions": 1, "replication_factor": 1, "configs": {}, **params}
    with pytest.raises(Invalid) as raised:
        actions.check_create_topic(cluster, **request)
    assert raised.value.field == field and message in raised.value.message
    assert request["name"] not in client_for(cluster).metadata(max_age_s=0).topics


def test_create_topic_that_exists_is_a_conflict(cluster, new_topic):
    name = new_topic()
    with pytest.raises(Conflict):
        actions.check_create_topic(cluster, name=name, partitions=1, replication_factor=1, configs={})


def test_create_form_validates_as_you_type(client, personas, cluster, topic_name):
    client.force_login(personas["oscar"])
    url = f"/clusters/{cluster.pk}/topics/new/"
    bad = client.post(
        url,
        {
            "name": topic_name,
            "partitions": "1",
            "replication_factor": "5",
            "configs": "",
            "validate_only": "1",
        },
        headers={"HX-Request": "true"},
    )
    assert b"number of brokers (1)" in bad.content and b"<html" not in bad.content
    good = client.post(
        url,
        {
            "name": topic_name,
            "partitions": "2",
            "replication_factor": "1",
            "configs": "retention.ms=1000\n# comment\n",
            "validate_only": "1",
        },
        headers={"HX-Request": "true"},
    )
    assert b"The cluster accepts this topic" in good.content
    assert topic_name not in client_for(cluster).metadata(max_age_s=0).topics
    malformed = client.post(
        url, {"name": topic_name, "partitions": "x", "replication_factor": "1", "configs": ""}
    )
    assert b"partitions must be a whole number" in malformed.content


def test_topic_detail_shows_partitions_offsets_and_sizes(victor_client, cluster, new_topic):
    name = new_topic(partitions=2)
    producer = client_for(cluster).producer()
    for _i in range(5):
        producer.produce(name, value=b"x" * 100, partition=1)
    producer.flush(10)
    page = victor_client.get(f"/clusters/{cluster.pk}/topics/{name}/")
    rows = {r.partition: r for r in page.context["partitions"]}
    assert (rows[0].start_offset, rows[0].end_offset) == (0, 0)
    assert (rows[1].end_offset, rows[1].messages, rows[1].leader, rows[1].isr) == (5, 5, 0, (0,))
    assert rows[1].size_bytes > 500
    assert victor_client.get(f"/clusters/{cluster.pk}/topics/no-such-topic/").status_code == 404


def test_a_topic_created_elsewhere_is_found_despite_the_cached_metadata(
    victor_client, api, cluster, topic_name
):
    """The console caches a cluster's metadata for a moment (METADATA_MAX_AGE_S); a topic another client just
    created is looked up afresh on a miss rather than answered 404."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.console.conftest import wait_for

    client_for(cluster).metadata(max_age_s=0)  # the cache, fresh, without the topic
    elsewhere = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    elsewhere.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    wait_for(lambda: topic_name in elsewhere.list_topics(timeout=5).topics, what="the topic in metadata")
    detail = api("victor").get(f"/api/v1/clusters/{cluster.pk}/topics/{topic_name}/")
    assert detail.status_code == 200, detail.content
    assert [p["partition"] for p in detail.json()["partition_details"]] == [0, 1]
    assert victor_client.get(f"/clusters/{cluster.pk}/topics/{topic_name}/").status_code == 200
    assert api("victor").get(f"/api/v1/clusters/{cluster.pk}/topics/{topic_name}-not/").status_code == 404


def test_topic_configs_page_edits_and_resets(client, personas, cluster, new_topic):
    name = new_topic(configs={"retention.ms": "3600000"})
    client.force_login(personas["oscar"])
    url = f"/clusters/{cluster.pk}/topics/{name}/configs/"
    page = client.get(url, {"q": "retention.ms"})
    row = next(c for c in page.context["configs"] if c.name == "retention.ms")
    assert (row.value, row.source) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    client.post(url, {"name": "retention.ms", "value": "7200000", "op": "set"})
    assert (
        next(c for c in client_for(cluster).topic_configs(name) if c.name == "retention.ms").value
        == "7200000"
    )
    client.post(url, {"name": "retention.ms", "op": "delete"})
    reset = next(c for c in client_for(cluster).topic_configs(name) if c.name == "retention.ms")
    assert reset.source != "DYNAMIC_TOPIC_CONFIG"
    refused = client.post(url, {"name": "retention.ms", "value": "never", "op": "set"}, follow=True)
    assert refused.status_code == 200 and b"flash-error" in refused.content
    outcomes = list(
        AuditEntry.objects.filter(action="topic.alter_configs")
        .order_by("id")
        .values_list("outcome", flat=True)
    )
    assert outcomes == [Outcome.OK, Outcome.OK, Outcome.INVALID]


def test_add_partitions_delete_records_and_delete_topic(client, personas, cluster, new_topic):
    name = new_topic(partitions=1)
    producer = client_for(cluster).producer()
    for i in range(10):
        producer.produce(name, value=str(i).encode(), partition=0)
    producer.flush(10)
    client.force_login(personas["alice"])
    base = f"/clusters/{cluster.pk}/topics/{name}"
    client.post(f"{base}/partitions/", {"count": "3"})
    assert len(client_for(cluster).metadata(max_age_s=0).topic(name).partitions) == 3
    shrink = client.post(f"{base}/partitions/", {"count": "2"}, follow=True)
    assert b"more than the current 3 partitions" in shrink.content
    client.post(f"{base}/delete-records/", {"partition": "0", "offset": "4"})
    assert client_for(cluster).offsets([(name, 0)], "earliest") == {(name, 0): 4}
    client.post(f"{base}/delete-records/", {"partition": ""})
    assert client_for(cluster).offsets([(name, 0)], "earliest") == {(name, 0): 10}
    wrong = client.post(f"{base}/delete/", {"confirm": "something-else"}, follow=True)
    assert b"type the topic" in wrong.content
    assert name in client_for(cluster).metadata(max_age_s=0).topics
    done = client.post(f"{base}/delete/", {"confirm": name})
    assert done.status_code == 302 and done["Location"] == f"/clusters/{cluster.pk}/topics/"
    assert name not in client_for(cluster).metadata(max_age_s=0).topics
    actions_done = list(
        AuditEntry.objects.filter(resource_name=name).order_by("id").values_list("action", "outcome")
    )
    assert actions_done == [
        ("topic.add_partitions", "ok"),
        ("topic.add_partitions", "invalid"),
        ("topic.delete_records", "ok"),
        ("topic.delete_records", "ok"),
        ("topic.delete", "invalid"),
        ("topic.delete", "ok"),
    ]


def test_operator_may_not_delete_a_topic(client, personas, cluster, new_topic):
    name = new_topic()
    client.force_login(personas["oscar"])
    response = client.post(f"/clusters/{cluster.pk}/topics/{name}/delete/", {"confirm": name})
    assert response.status_code == 403
    assert name in client_for(cluster).metadata(max_age_s=0).topics
    assert AuditEntry.objects.get(action="topic.delete").outcome == Outcome.DENIED


# ---------------------------------------------------------------------------------------------- API


def test_api_topics(api, cluster, new_topic):
    name = new_topic(partitions=2, configs={"retention.ms": "60000"})
    listing = api("victor").get(f"/api/v1/clusters/{cluster.pk}/topics/", {"q": name}).json()
    assert listing["count"] == 1
    assert listing["results"] == [
        {
            "name": name,
            "partitions": 2,
            "replication_factor": 1,
            "under_replicated": 0,
            "offline": 0,
            "internal": False,
        }
    ]
    detail = api("victor").get(f"/api/v1/clusters/{cluster.pk}/topics/{name}/").json()
    assert [p["partition"] for p in detail["partition_details"]] == [0, 1]
    configs = api("victor").get(f"/api/v1/clusters/{cluster.pk}/topics/{name}/configs/").json()
    assert {"name": "retention.ms", "value": "60000", "source": "DYNAMIC_TOPIC_CONFIG"}.items() <= next(
        c for c in configs if c["name"] == "retention.ms"
    ).items()
    assert api("victor").get(f"/api/v1/clusters/{cluster.pk}/topics/nope/").status_code == 404


def test_api_create_topic_errors_name_the_field(api, cluster, new_topic):
    url = f"/api/v1/clusters/{cluster.pk}/topics/"
    missing = api("oscar").post(url, {"name": "x"}, format="json")
    assert missing.status_code == 400 and set(missing.json()) == {"partitions", "replication_factor"}
    too_many = api("oscar").post(url, {"name": "x1", "partitions": 1, "replication_factor": 3}, format="json")
    assert too_many.status_code == 400 and list(too_many.json()) == ["replication_factor"]
    bad_config = api("oscar").post(
        url,
        {"name": "x2", "partitions": 1, "replication_factor": 1, "configs": {"cleanup.policy": "sometimes"}},
        format="json",
    )
    assert bad_config.status_code == 400 and list(bad_config.json()) == ["configs"]
    existing = new_topic()
    conflict = api("oscar").post(
        url, {"name": existing, "partitions": 1, "replication_factor": 1}, format="json"
    )
    assert conflict.status_code == 409 and "already exists" in conflict.json()["detail"]


def test_api_configs_partitions_delete_records_and_delete(api, cluster, new_topic):
    name = new_topic()
    base = f"/api/v1/clusters/{cluster.pk}/topics/{name}"
    patched = api("oscar").patch(f"{base}/configs/", {"configs": {"retention.ms": "1234"}}, format="json")
    assert next(c for c in patched.json() if c["name"] == "retention.ms")["value"] == "1234"
    bad = api("oscar").patch(f"{base}/configs/", {"configs": {"retention.ms": "x"}}, format="json")
    assert bad.status_code == 400 and list(bad.json()) == ["configs"]
    grown = api("oscar").post(f"{base}/partitions/", {"count": 4}, format="json")
    assert grown.status_code == 200 and len(grown.json()) == 4
    assert api("oscar").post(f"{base}/partitions/", {"count": 2}, format="json").status_code == 400
    emptied = api("alice").post(f"{base}/delete-records/", {}, format="json")
    assert emptied.status_code == 200 and set(emptied.json()["start_offsets"]) == {"0", "1", "2", "3"}
    assert (
        api("alice").post(f"{base}/delete-records/", {"before": {"9": 0}}, format="json").status_code == 400
    )
    assert api("alice").delete(f"{base}/").status_code == 400
    assert api("alice").delete(f"{base}/?confirm={name}").status_code == 204
    assert api("alice").get(f"{base}/").status_code == 404
