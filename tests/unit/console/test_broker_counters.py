"""Reading the brokers' topic counters: the metrics address from a listener value, the per-topic counters of a
/metrics page, and rates over rounds of several brokers (one of them restarted)."""

from __future__ import annotations

import pytest

from console.monitoring.broker_metrics import TopicCounters, metrics_url, parse_topic_counters
from console.monitoring.selectors import _counter_rates


@pytest.mark.parametrize(
    ("listener", "advertised", "url"),
    [
        ("http://127.0.0.1:9644", "10.0.0.5", "http://127.0.0.1:9644/metrics"),
        ("http://0.0.0.0:9644", "10.0.0.5", "http://10.0.0.5:9644/metrics"),
        ("http://[::]:9644", "fd00::5", "http://[fd00::5]:9644/metrics"),
        ("http://metrics.example:9000", "b1", "http://metrics.example:9000/metrics"),
        ("", "b1", None),
        ("127.0.0.1:9644", "b1", None),  # not a URL
        ("https://h:1", "b1", None),  # the broker serves plain HTTP only
        ("http://h", "b1", None),  # no port
    ],
)
def test_metrics_url(listener, advertised, url):
    assert metrics_url(listener, advertised) == url


def test_parse_topic_counters_keeps_topics_and_skips_totals():
    page = """\
# HELP kafka_server_brokertopicmetrics_bytesin_total Record batch bytes received from producers.
# TYPE kafka_server_brokertopicmetrics_bytesin_total counter
kafka_server_brokertopicmetrics_bytesin_total{topic="orders"} 1200.0
kafka_server_brokertopicmetrics_bytesin_total{topic="audit"} 5.0
kafka_server_brokertopicmetrics_bytesin_total 1205.0
# HELP kafka_server_brokertopicmetrics_bytesout_total Record batch bytes sent.
# TYPE kafka_server_brokertopicmetrics_bytesout_total counter
kafka_server_brokertopicmetrics_bytesout_total{topic="orders"} 3600.0
kafka_server_brokertopicmetrics_bytesout_total 3600.0
# HELP kafka_server_brokertopicmetrics_messagesin_total Messages appended.
# TYPE kafka_server_brokertopicmetrics_messagesin_total counter
kafka_server_brokertopicmetrics_messagesin_total{topic="orders"} 12.0
# HELP kafka_log_log_size Bytes of a partition's log.
# TYPE kafka_log_log_size gauge
kafka_log_log_size{partition="0",topic="orders"} 99999.0
"""
    assert parse_topic_counters(page) == {
        "orders": TopicCounters(bytes_in=1200, bytes_out=3600, messages_in=12),
        "audit": TopicCounters(bytes_in=5),
    }


def test_counter_rates_sum_brokers_and_survive_a_restart():
    rows = [
        (0, 0, 0), (0, 10_000, 1_000), (0, 20_000, 3_000),
        (1, 0, 500), (1, 10_000, 1_500), (1, 20_000, 200),  # broker 1 restarted: counts from zero again
    ]  # fmt: skip
    assert _counter_rates(rows) == [(10_000, 200.0), (20_000, 220.0)]
    assert _counter_rates([(0, 5, 7)]) == []  # one round: no rate yet
