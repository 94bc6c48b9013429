"""Per-topic byte and message counters read from the brokers' own Prometheus endpoints, for the topic charts
(bytes out exists nowhere in the Kafka protocol).

Each broker says where it serves metrics in its config `odradek.metrics.listener` (read with DescribeConfigs, so
only brokers that have it are scraped: a cluster that is not Odradek, or a broker without the listener, simply
has no byte rates from here). A listener bound to a wildcard address is reached at the broker's advertised
host. A broker that does not answer within SCRAPE_TIMEOUT_S is skipped for the round."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from console.errors import ConsoleError

log = logging.getLogger(__name__)
LISTENER_CONFIG = "odradek.metrics.listener"
SCRAPE_TIMEOUT_S = 3.0
MAX_BODY_BYTES = 64 * 1024 * 1024
PREFIX = "kafka_server_brokertopicmetrics_"
FIELDS = {"bytesin": "bytes_in", "bytesout": "bytes_out", "messagesin": "messages_in"}


@dataclass
class TopicCounters:
    bytes_in: int = 0
    bytes_out: int = 0
    messages_in: int = 0


def metrics_url(listener: str, advertised_host: str) -> str | None:
    """http://host:port/metrics for a listener value; None when it is empty or not http://host:port."""
    if not listener:
        return None
    parts = urlsplit(listener)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        return None
    host = advertised_host if parts.hostname in ("0.0.0.0", "::", "") else parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{parts.port}/metrics"


def parse_topic_counters(text: str) -> dict[str, TopicCounters]:
    """The per-topic counters of one broker's /metrics page (the series without a topic label are its totals)."""
    out: dict[str, TopicCounters] = {}
    for family in text_string_to_metric_families(text):
        field = FIELDS.get(family.name.removeprefix(PREFIX)) if family.name.startswith(PREFIX) else None
        if field is None:
            continue
        for sample in family.samples:
            topic = sample.labels.get("topic")
            if topic and sample.name.endswith("_total"):
                setattr(out.setdefault(topic, TopicCounters()), field, int(sample.value))
    return out


def listener_urls(client, brokers) -> dict[int, str]:
    """{broker id: metrics URL} of the brokers that serve metrics."""
    urls = {}
    for broker in brokers:
        try:
            configs = {row.name: row.value for row in client.broker_configs(broker.id)}
        except ConsoleError as exc:
            log.info("configs of broker %d not read: %s", broker.id, exc)
            continue
        url = metrics_url(configs.get(LISTENER_CONFIG) or "", broker.host)
        if url is not None:
            urls[broker.id] = url
    return urls


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        return response.read(MAX_BODY_BYTES).decode()


def scrape_brokers(client, brokers) -> dict[int, dict[str, TopicCounters]]:
    """{broker id: {topic: counters}} of every broker that serves metrics and answered, scraped in parallel."""
    urls = listener_urls(client, brokers)
    if not urls:
        return {}
    out = {}
    with ThreadPoolExecutor(max_workers=min(8, len(urls))) as pool:
        pages = {broker_id: pool.submit(_scrape, url) for broker_id, url in urls.items()}
        for broker_id, page in pages.items():
            try:
                out[broker_id] = parse_topic_counters(page.result())
            except (OSError, ValueError, urllib.error.URLError) as exc:
                log.warning("metrics of broker %d at %s not read: %s", broker_id, urls[broker_id], exc)
    return out
