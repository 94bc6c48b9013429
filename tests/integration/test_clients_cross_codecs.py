"""Every codec, produced by each client that has it and read back by every client.

Per codec, confluent-kafka, kafka-python, aiokafka and kafkajs each append the sample records (keys, null keys,
empty and null values, binary, unicode, repeated headers, explicit timestamps, a 100 kB value) to one partition,
so the log holds batches from four different encoders. Then each client reads the whole partition from offset 0
and must see exactly what was sent, in order. The broker stores batches as sent and never decompresses them on
the hot path, so what is tested is that it keeps and serves them byte-for-byte (offsets and epoch stamped) and
that fetch boundaries between batches of different encoders are right.

kafkajs has gzip built in; snappy comes from kafkajs-snappy, lz4 and zstd from pure-JS/WebAssembly codecs (see
js/codecs.js), because @kafkajs/zstd and kafkajs-lz4 need native builds.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

PRODUCERS = ["confluent", "kafka-python", "aiokafka", "kafkajs"]
CONSUMERS = ["confluent", "kafka-python", "aiokafka", "kafkajs"]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_codec_across_clients(bootstrap, new_topic, clients, codec):
    topic = new_topic()
    expected = []
    for producer in PRODUCERS:
        recs = [
            replace(r, headers=(*r.headers, ("producer", producer.encode())))
            for r in clients.sample_records()
        ]
        offsets = clients.produce(producer, bootstrap, topic, recs, compression=codec)
        assert offsets == list(range(len(expected), len(expected) + len(recs))), (
            f"{producer}/{codec}: offsets {offsets}"
        )
        expected += recs

    failures = []
    for consumer in CONSUMERS:
        try:
            got = clients.consume(consumer, bootstrap, topic, len(expected))
        except Exception as e:  # report every consumer, not just the first that breaks
            failures.append(f"{consumer}: {type(e).__name__}: {e}")
            continue
        if [r.offset for r in got] != list(range(len(expected))):
            failures.append(f"{consumer}: offsets {[r.offset for r in got]}")
        for i, (g, e) in enumerate(zip(got, expected, strict=False)):
            if g.content() != e.content():
                producer = dict(e.headers)["producer"].decode()
                failures.append(
                    f"{consumer} reading {producer}'s record at offset {i}: got "
                    f"{_short(g.content())} expected {_short(e.content())}"
                )
                break
    assert not failures, "\n".join(failures)


def _short(content: tuple) -> str:
    text = repr(content)
    return text if len(text) < 300 else text[:300] + "..."
