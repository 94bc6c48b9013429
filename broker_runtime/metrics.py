"""Prometheus metrics of one broker, served at /metrics on `odradek.metrics.listener`.

The request and produce/fetch paths only add to plain ints and lists (`BrokerMetrics.record_*`); everything is
turned into metric families at scrape time by `BrokerCollector`, on the broker's own registry (never the global
one, so that several brokers in one process stay apart). Names follow the Prometheus JMX exporter's rendering of
Kafka's MBeans, as Strimzi's dashboards graph them. The HTTP server is a small asyncio handler on the broker's
event loop, so a scrape reads broker state without locks.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
from collections import defaultdict
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.txn.coordinator import RETRY_COMPLETION
from broker_runtime.txn.verification import VERIFICATION_MS_BUCKETS

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

log = logging.getLogger(__name__)

# Upper bounds (seconds) of the request latency histogram: from a cached read to a long poll's maximum wait.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Topic:
    __slots__ = ("bytes_in", "bytes_out", "messages_in")

    def __init__(self) -> None:
        self.messages_in = self.bytes_in = self.bytes_out = 0


class _Api:
    __slots__ = ("buckets", "requests", "seconds")

    def __init__(self) -> None:
        self.requests: dict[int, int] = defaultdict(int)  # by version
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.seconds = 0.0


def _ignore(*_args) -> None:
    pass


class BrokerMetrics:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.topics: dict[str, _Topic] = defaultdict(_Topic)
        self.apis: dict[int, _Api] = defaultdict(_Api)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(self))
        ProcessCollector(registry=self.registry)
        self._server: asyncio.Server | None = None
        if not broker.config["odradek.metrics.listener"]:
            # Nothing can be scraped (the listener is not a dynamic config): the hot paths' calls do nothing.
            self.record_request = self.record_produce = self.record_fetch = _ignore  # type: ignore[method-assign]

    # --- hot paths: plain arithmetic only ----------------------------------------------------------------

    def record_request(self, api_key: int, api_version: int, seconds: float) -> None:
        api = self.apis[api_key]
        api.requests[api_version] += 1
        api.buckets[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        api.seconds += seconds

    def record_produce(self, topic: str, messages: int, size: int) -> None:
        counts = self.topics[topic]
        counts.messages_in += messages
        counts.bytes_in += size

    def record_fetch(self, topic: str, size: int) -> None:
        self.topics[topic].bytes_out += size

    # --- the HTTP listener ----------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        log.info("broker %d serves metrics at http://%s:%d/metrics", self.broker.broker_id, host, self.port)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass  # headers are not needed
            parts = request_line.decode("latin-1").split()
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET /metrics\n"
            elif parts[1].split("?", 1)[0] != "/metrics":
                status, ctype, body = "404 Not Found", "text/plain", b"metrics are at /metrics\n"
            else:
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
            head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close"
            writer.write(head.encode() + b"\r\n\r\n" + (body if parts[0:1] != ["HEAD"] else b""))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass  # a scraper that went away or sent garbage gets nothing more
        finally:
            writer.close()


def _api_name(api_key: int) -> str:
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


class BrokerCollector:
    """Builds every broker metric family at scrape time from the counters and the broker's state."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self):
        yield from self._topic_counters()
        yield from self._requests()
        yield from self._partitions()
        yield from self._groups()
        yield from self._transactions()
        yield from self._coordinator_loads()
        yield from self._verification()
        yield from self._controller()

    def _topic_counters(self):
        prefix = "kafka_server_brokertopicmetrics_"
        for field, name, doc in (
            ("messages_in", "messagesin", "Messages appended by producers."),
            ("bytes_in", "bytesin", "Record batch bytes received from producers."),
            ("bytes_out", "bytesout", "Record batch bytes sent to consumers and followers."),
        ):
            family = CounterMetricFamily(prefix + name, doc, labels=["topic"])
            total = 0
            for topic, counts in sorted(self.metrics.topics.items()):
                value = getattr(counts, field)
                total += value
                family.add_metric([topic], value)
            # The broker total, without the topic label, as the JMX exporter renders Kafka's all-topics MBean.
            family.add_metric([], total)
            yield family

    def _requests(self):
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests", "Requests answered, by API and version.",
            labels=["request", "version"],
        )  # fmt: skip
        latency = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems_seconds",
            "Time from a request's arrival to its response, in seconds, by API.", labels=["request"],
        )  # fmt: skip
        for api_key, api in sorted(self.metrics.apis.items()):
            name = _api_name(api_key)
            for version, count in sorted(api.requests.items()):
                requests.add_metric([name, str(version)], count)
            cumulative, buckets = 0, []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), api.buckets, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            latency.add_metric([name], buckets, api.seconds)
        yield requests
        yield latency

    def _partitions(self):
        broker = self.metrics.broker
        rm = broker.replica_manager
        partitions = [p for key in rm.high_watermarks() if (p := rm.get_partition(*key)) is not None]
        leaders = [p for p in partitions if p.is_leader]
        prefix = "kafka_server_replicamanager_"
        yield GaugeMetricFamily(prefix + "partitioncount", "Partitions hosted.", value=len(partitions))
        yield GaugeMetricFamily(prefix + "leadercount", "Partitions this broker leads.", value=len(leaders))
        yield GaugeMetricFamily(
            prefix + "underreplicatedpartitions", "Led partitions whose ISR is smaller than their replica set.",
            value=sum(1 for p in leaders if len(p.isr) < len(p.replicas)),
        )  # fmt: skip
        for name, value, doc in (
            ("isrexpands", rm.isr_expands, "ISR expansions the controller accepted for partitions led here."),
            ("isrshrinks", rm.isr_shrinks, "ISR shrinks the controller accepted for partitions led here."),
            ("failedisrupdates", rm.failed_isr_updates, "ISR changes the controller refused or that failed."),
        ):
            yield CounterMetricFamily(prefix + name, doc, value=value)
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes of a partition's log.", labels=["topic", "partition"]
        )
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "A partition's log end offset.", labels=["topic", "partition"]
        )
        for p in sorted(partitions, key=lambda p: (p.topic, p.index)):
            labels = [p.topic, str(p.index)]
            size.add_metric(labels, p.log.size_bytes())
            end.add_metric(labels, p.log.log_end_offset)
        yield size
        yield end

    def _groups(self):
        coordinator = self.metrics.broker.group_coordinator
        counts: dict[str, int] = defaultdict(int)
        for shard in coordinator.active_shards() if coordinator is not None else ():
            for group in shard.groups.values():
                counts[group.state.value] += 1
        family = GaugeMetricFamily(
            "kafka_coordinator_group_groupmetadatamanager_numgroups",
            "Groups this broker coordinates, by state.", labels=["state"],
        )  # fmt: skip
        for state, count in sorted(counts.items()):
            family.add_metric([state], count)
        yield family

    def _transactions(self):
        """The transaction coordinator's shards on this broker (the `__transaction_state` partitions it leads):
        Kafka's LogAppendRetryQueueSize (completion records waiting to be written again), and, under odradek_
        names since Kafka has none, transactional ids by state and transactions whose markers are being written."""
        runtime = self.metrics.broker.txn_coordinator
        shards = runtime.active_shards() if runtime is not None else []
        states: dict[str, int] = defaultdict(int)
        retries = 0
        for shard in shards:
            for metadata in shard.transactions.values():
                states[metadata.state.display_name] += 1
            retries += sum(1 for key in shard.timers.keys() if key[0] == RETRY_COMPLETION)  # noqa: SIM118
        yield GaugeMetricFamily(
            "kafka_coordinator_transaction_transactionmarkerchannelmanager_logappendretryqueuesize",
            "Transaction completions waiting to be written to __transaction_state again.", value=retries,
        )  # fmt: skip
        by_state = GaugeMetricFamily(
            "odradek_transaction_coordinator_transactions",
            "Transactional ids this broker coordinates, by transaction state.", labels=["state"],
        )  # fmt: skip
        for state, count in sorted(states.items()):
            by_state.add_metric([state], count)
        yield by_state
        yield GaugeMetricFamily(
            "odradek_transaction_coordinator_pending_markers",
            "Transactions whose commit or abort markers are still being written.",
            value=runtime.markers.pending_transactions if runtime is not None else 0,
        )
        yield GaugeMetricFamily(
            "kafka_coordinator_transaction_transactionmarkerchannelmanager_unknowndestinationqueuesize",
            "Transactions whose markers wait for a partition leader to become known.",
            value=runtime.markers.unknown_destination_queue_size if runtime is not None else 0,
        )

    def _coordinator_loads(self):
        """Kafka's partition-load-time-max/avg of the group and transaction coordinators (Kafka metrics, rendered
        as the JMX exporter names `kafka.server:type=group-coordinator-metrics` attributes); NaN without a
        load in the window, as Kafka's Max and Avg read then."""
        broker = self.metrics.broker
        for runtime, group, coordinator in (
            (broker.group_coordinator, "group_coordinator_metrics", "group"),
            (broker.txn_coordinator, "transaction_coordinator_metrics", "transaction"),
        ):
            took = runtime.load_times_ms() if runtime is not None else []
            prefix = f"kafka_server_{group}_partition_load_time_"
            yield GaugeMetricFamily(
                prefix + "max", f"The max time it took to load the {coordinator} coordinator's partitions, in ms, "
                "over the last 30 to 60 s.", value=max(took) if took else math.nan,
            )  # fmt: skip
            yield GaugeMetricFamily(
                prefix + "avg", f"The avg time it took to load the {coordinator} coordinator's partitions, in ms, "
                "over the last 30 to 60 s.", value=sum(took) / len(took) if took else math.nan,
            )  # fmt: skip

    def _verification(self):
        """KIP-890 verification of transactional appends (Kafka's AddPartitionsToTxnManager): VerificationTimeMs as
        a histogram in ms (its `_count` is the JMX exporter's) with the mean and max, and VerificationFailureRate's
        count of partitions not verified, as a counter."""
        verifier = self.metrics.broker.txn_verifier
        if verifier is None:
            return
        stats = verifier.stats
        prefix = "kafka_server_addpartitionstotxnmanager_"
        time_ms = HistogramMetricFamily(
            prefix + "verificationtimems",
            "Time to verify a transactional append with its coordinator, in ms.",
        )
        cumulative, buckets = 0, []
        for bound, count in zip((*VERIFICATION_MS_BUCKETS, math.inf), stats.buckets, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else str(bound), cumulative))
        time_ms.add_metric([], buckets, stats.sum_ms)
        yield time_ms
        yield GaugeMetricFamily(
            prefix + "verificationtimems_mean", "Mean time to verify a transactional append, in ms.",
            value=stats.sum_ms / stats.count if stats.count else 0,
        )  # fmt: skip
        yield GaugeMetricFamily(
            prefix + "verificationtimems_max", "Longest time to verify a transactional append, in ms.",
            value=stats.max_ms,
        )  # fmt: skip
        yield CounterMetricFamily(
            prefix + "verificationfailurerate", "Partitions whose transaction verification failed.",
            value=stats.failures,
        )  # fmt: skip

    def _controller(self):
        member = self.metrics.broker.member
        prefix = "kafka_controller_kafkacontroller_"
        if member is None:  # a standalone broker is its own controller and leads every partition
            active, offline = True, 0
        else:
            active = member.controller.is_active
            # Only the active controller knows the cluster's leadership.
            offline = len(member.controller.ctx.partitions_with_offline_leader()) if active else None
        yield GaugeMetricFamily(
            prefix + "activecontrollercount", "1 on the active controller, 0 elsewhere.", value=int(active)
        )
        if offline is not None:
            yield GaugeMetricFamily(
                prefix + "offlinepartitionscount", "Partitions without a live leader.", value=offline
            )
