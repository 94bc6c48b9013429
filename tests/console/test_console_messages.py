"""The message browser and producing, through the page and the API, against the shared broker."""

from __future__ import annotations

import base64
import json
import time

import pytest

from console.audit.models import AuditEntry
from console.clusters.client import client_for
from console.errors import Invalid
from console.topics import messages


@pytest.fixture
def filled_topic(cluster, new_topic):
    """Two partitions: p0 has 30 records (timestamps 1 s apart from T0), p1 has 5 JSON records."""
    name = new_topic(partitions=2)
    producer = client_for(cluster).producer()
    t0 = int(time.time() * 1000) - 3_600_000
    for i in range(30):
        producer.produce(
            name,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=0,
            timestamp=t0 + i * 1000,
            headers=[("n", str(i).encode())],
        )
    for i in range(5):
        producer.produce(name, value=json.dumps({"i": i}).encode(), partition=1, timestamp=t0 + 100_000 + i)
    assert producer.flush(10) == 0
    return name, t0


def test_browse_modes(cluster, filled_topic):
    name, t0 = filled_topic
    newest = messages.browse(cluster, name, mode="newest", partition=0, limit=5)
    assert [m.offset for m in newest.messages] == [29, 28, 27, 26, 25]
    assert newest.next_offsets == {0: 30}
    oldest = messages.browse(cluster, name, mode="oldest", partition=0, limit=3)
    assert [(m.offset, m.key, m.value, m.headers) for m in oldest.messages] == [
        (0, b"k0", b"v0", [("n", b"0")]),
        (1, b"k1", b"v1", [("n", b"1")]),
        (2, b"k2", b"v2", [("n", b"2")]),
    ]
    assert oldest.stopped_by == "limit"
    from_offset = messages.browse(cluster, name, mode="offset", partition=0, offset=27, limit=10)
    assert [m.offset for m in from_offset.messages] == [27, 28, 29] and from_offset.stopped_by == "end"
    at_time = messages.browse(cluster, name, mode="timestamp", partition=0, timestamp_ms=t0 + 10_500, limit=2)
    assert [m.offset for m in at_time.messages] == [11, 12]
    both = messages.browse(cluster, name, mode="newest", limit=3)
    assert [(m.partition, m.offset) for m in both.messages] == [(1, 4), (1, 3), (1, 2)]


def test_tail_reads_only_what_arrives_after_the_cursor(cluster, filled_topic):
    name, _ = filled_topic
    first = messages.browse(cluster, name, mode="tail", time_limit_s=0.5)
    assert first.messages == [] and first.next_offsets == {0: 30, 1: 5}
    producer = client_for(cluster).producer()
    producer.produce(name, value=b"new", partition=1)
    producer.flush(10)
    second = messages.browse(cluster, name, mode="tail", cursor=first.next_offsets, time_limit_s=2)
    assert [(m.partition, m.offset, m.value) for m in second.messages] == [(1, 5, b"new")]
    assert second.next_offsets == {0: 30, 1: 6}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "sideways"}, "mode"),
        ({"limit": 0}, "limit"),
        ({"mode": "offset"}, "offset"),
        ({"mode": "timestamp"}, "timestamp"),
        ({"partition": 9}, "partition"),
    ],
)
def test_browse_refuses_bad_requests(cluster, filled_topic, kwargs, field):
    with pytest.raises(Invalid) as raised:
        messages.browse(cluster, filled_topic[0], **kwargs)
    assert raised.value.field == field


def test_render_formats():
    assert messages.render(b'{"a": [1, 2]}') == ('{\n  "a": [\n    1,\n    2\n  ]\n}', "json")
    assert messages.render(b"plain") == ("plain", "text")
    assert messages.render(b"") == ("", "text")
    assert messages.render(b"\xff\x00") == ("ff 00", "hex")
    assert messages.render(b"abc", "hex") == ("61 62 63", "hex")
    assert messages.render(None) == ("null", "null")
    assert messages.render(b"[not json", "json") == ("[not json", "text (not JSON)")
    big, _ = messages.render(b"x" * 20000)
    assert big.endswith("(20,000 bytes in all)")


def test_messages_page_shows_records_and_tail_fragment(client, personas, cluster, filled_topic):
    name, _ = filled_topic
    client.force_login(personas["victor"])
    url = f"/clusters/{cluster.pk}/topics/{name}/messages/"
    page = client.get(url, {"mode": "oldest", "partition": "1", "limit": "2"})
    assert page.status_code == 200
    assert [r["m"].offset for r in page.context["rows"]] == [0, 1]
    assert page.context["rows"][0]["value_format"] == "json"
    assert b"stopped at the record limit" in page.content
    tail = client.get(url, {"mode": "tail", "partition": "1"})
    assert b"data-tail-poller" in tail.content
    poll = client.get(
        url, {"mode": "tail", "poll": "1", "cursor": json.dumps({"1": 3})}, headers={"HX-Request": "true"}
    )
    assert [r["m"].offset for r in poll.context["rows"]] == [4, 3]
    assert b"<html" not in poll.content and b"data-tail-poller" in poll.content
    bad = client.get(url, {"mode": "offset"})
    assert b"offset is required" in bad.content


def test_produce_page(client, personas, cluster, filled_topic):
    name, _ = filled_topic
    client.force_login(personas["oscar"])
    url = f"/clusters/{cluster.pk}/topics/{name}/produce/"
    response = client.post(
        url,
        {
            "key": "k",
            "key_encoding": "text",
            "value": '{"paid": true}',
            "value_encoding": "json",
            "headers": "source: console\ntrace: 1",
            "partition": "1",
        },
    )
    assert response.status_code == 302 and "partition=1" in response["Location"]
    record = messages.browse(cluster, name, mode="newest", partition=1, limit=1).messages[0]
    assert (record.offset, record.key, record.value, record.headers) == (
        5,
        b"k",
        b'{"paid": true}',
        [("source", b"console"), ("trace", b"1")],
    )
    invalid = client.post(url, {"value": "{nope", "value_encoding": "json", "key_encoding": "text"})
    assert invalid.status_code == 200 and b"not valid JSON" in invalid.content
    entry = AuditEntry.objects.filter(action="message.produce").order_by("id").first()
    assert entry.params == {"partition": 1, "key_bytes": 1, "value_bytes": 14, "headers": ["source", "trace"]}
    assert "paid" not in json.dumps(entry.params)  # message contents stay out of the audit trail
    client.force_login(personas["victor"])
    assert client.post(url, {"value": "x"}).status_code == 403


def test_api_browse_and_produce(api, cluster, filled_topic):
    name, t0 = filled_topic
    url = f"/api/v1/clusters/{cluster.pk}/topics/{name}/messages/"
    produced = api("oscar").post(
        url,
        {
            "key": None,
            "value": base64.b64encode(b"\x00\xff").decode(),
            "value_encoding": "base64",
            "partition": 0,
            "headers": [{"key": "h", "value": "1"}],
        },
        format="json",
    )
    assert produced.status_code == 201 and produced.json() == {"partition": 0, "offset": 30}
    body = api("victor").get(url, {"mode": "offset", "partition": 0, "offset": 29, "limit": 5}).json()
    assert body["stopped_by"] == "end" and body["next_offsets"] == {"0": 31}
    last = body["messages"][-1]
    assert (last["key"], last["key_encoding"], last["value"], last["value_encoding"]) == (
        None,
        "null",
        "AP8=",
        "base64",
    )
    assert last["headers"] == [{"key": "h", "value": "1", "encoding": "utf-8"}]
    assert body["messages"][0]["value"] == "v29" and body["messages"][0]["timestamp"] == t0 + 29_000
    bad = api("victor").get(url, {"mode": "offset"})
    assert bad.status_code == 400 and list(bad.json()) == ["offset"]
    too_many = api("victor").get(url, {"limit": 100000})
    assert too_many.status_code == 400 and list(too_many.json()) == ["limit"]
    tail = (
        api("victor")
        .get(url, {"mode": "tail", "cursor": json.dumps({"0": 30, "1": 5}), "time_limit_ms": 500})
        .json()
    )
    assert [m["offset"] for m in tail["messages"]] == [30]
    assert api("oscar").post(url, {"value": "x", "partition": 7}, format="json").status_code == 400
    assert api("victor").post(url, {"value": "x"}, format="json").status_code == 403
