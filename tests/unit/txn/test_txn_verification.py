"""The verifier partition leaders ask (Kafka's AddPartitionsToTxnManager): in process when this broker leads the
transactional id's `__transaction_state` partition, otherwise AddPartitionsToTxn verifyOnly, one request in flight
per coordinator broker carrying every transactional id queued meanwhile; Kafka's rules for a second request of a
queued id; Kafka's error mapping for the answer and for Produce. The other broker is a scripted client."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS

from kio.schema.errors import ErrorCode as E

from broker_runtime.clock import ManualClock
from broker_runtime.errors import KafkaError
from broker_runtime.txn.records import TRANSACTION_STATE_TOPIC, transaction_partition
from broker_runtime.txn.verification import TransactionVerifier, produce_error

HERE, THERE = 1, 2
PARTITIONS = 4
TP = ("orders", 0)


def tid_led_by(leaders: dict[int, int], broker: int, prefix: str = "t") -> str:
    n = 0
    while leaders[transaction_partition(f"{prefix}{n}", PARTITIONS)] != broker:
        n += 1
    return f"{prefix}{n}"


class FakeBroker:
    def __init__(self, leaders: dict[int, int]) -> None:
        self.broker_id = HERE
        self.clock = ManualClock()
        self.config = {"request.timeout.ms": 30000, "transaction.partition.verification.enable": True}
        partitions = {p: NS(leader=leader) for p, leader in leaders.items()}
        topics = {TRANSACTION_STATE_TOPIC: NS(partitions=partitions)}
        self.metadata = NS(
            topics=lambda: topics,
            brokers=lambda: [NS(broker_id=b, host="127.0.0.1", port=9000 + b) for b in (HERE, THERE)],
        )
        self.local_answers: dict[str, object] = {}
        self.txn_coordinator = NS(num_partitions=PARTITIONS, verify_partitions_now=self._verify_here)

    def _verify_here(self, tid, pid, epoch, partitions):
        answer = self.local_answers[tid]
        if isinstance(answer, KafkaError):
            raise answer
        return {tp: answer for tp in partitions}


class ScriptedClient:
    """The coordinator broker: answers each verifyOnly transaction with `answers[tid]`, after `gate` opens."""

    def __init__(self) -> None:
        self.requests: list = []
        self.answers: dict[str, E] = {}
        self.top_level = E.none
        self.fail: Exception | None = None
        self.gate = asyncio.Event()
        self.gate.set()
        self.arrived = asyncio.Event()  # set by each request

    async def send_to(self, broker_id, host, port, request):
        self.requests.append(request)
        self.arrived.set()
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return NS(
            error_code=self.top_level,
            results_by_transaction=[
                NS(transactional_id=t.transactional_id, topic_results=[
                    NS(name=topic.name, results_by_partition=[
                        NS(partition_index=p, partition_error_code=self.answers.get(t.transactional_id, E.none))
                        for p in topic.partitions
                    ])
                    for topic in t.topics
                ])
                for t in request.transactions
            ],
        )  # fmt: skip

    async def close(self) -> None:
        pass


def make(leaders: dict[int, int]) -> tuple[FakeBroker, TransactionVerifier, ScriptedClient]:
    broker = FakeBroker(leaders)
    verifier = TransactionVerifier(broker)
    client = ScriptedClient()
    verifier._client = client
    return broker, verifier, client


LEADERS = {0: HERE, 1: THERE, 2: THERE, 3: HERE}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_a_local_coordinator_is_asked_in_process_with_kafkas_mapping() -> None:
    async def scenario():
        broker, verifier, client = make(LEADERS)
        tid = tid_led_by(LEADERS, HERE)
        broker.local_answers[tid] = E.none
        assert await verifier.verify(tid, 7, 0, [TP], generic_errors=False) == {}
        broker.local_answers[tid] = E.transaction_abortable
        assert await verifier.verify(tid, 7, 0, [TP], generic_errors=False) == {TP: E.invalid_txn_state}
        assert await verifier.verify(tid, 7, 0, [TP], generic_errors=True) == {TP: E.transaction_abortable}
        broker.local_answers[tid] = E.producer_fenced
        assert await verifier.verify(tid, 7, 0, [TP], generic_errors=True) == {TP: E.invalid_producer_epoch}
        broker.local_answers[tid] = KafkaError(E.not_coordinator)
        assert await verifier.verify(tid, 7, 0, [TP], generic_errors=True) == {TP: E.not_coordinator}
        assert client.requests == []  # nothing went over the network
        # Produce's synchronous form answers the same at once; a remote coordinator's answer cannot be had so.
        assert verifier.verify_in_process(tid, 7, 0, [TP], generic_errors=True) == {TP: E.not_coordinator}
        remote = tid_led_by(LEADERS, THERE)
        assert verifier.verify_in_process(remote, 7, 0, [TP], generic_errors=True) is None

    run(scenario())


def test_a_remote_coordinator_gets_batched_verify_only_requests() -> None:
    async def scenario():
        _, verifier, client = make(LEADERS)
        first = tid_led_by(LEADERS, THERE, "a")
        second, third = tid_led_by(LEADERS, THERE, "b"), tid_led_by(LEADERS, THERE, "c")
        client.gate.clear()
        one = asyncio.create_task(verifier.verify(first, 1, 0, [TP], generic_errors=False))
        await client.arrived.wait()
        assert len(client.requests) == 1  # in flight; the next ones wait for it
        client.answers[third] = E.transaction_abortable
        two = asyncio.create_task(verifier.verify(second, 2, 0, [TP, ("orders", 1)], generic_errors=False))
        three = asyncio.create_task(verifier.verify(third, 3, 0, [TP], generic_errors=False))
        await asyncio.sleep(0)
        assert len(client.requests) == 1
        client.gate.set()
        assert await one == {} and await two == {} and await three == {TP: E.invalid_txn_state}
        assert len(client.requests) == 2
        batched = client.requests[1].transactions
        assert [(t.transactional_id, t.producer_id, t.verify_only) for t in batched] == [
            (second, 2, True), (third, 3, True),
        ]  # fmt: skip
        assert [(t.name, t.partitions) for t in batched[0].topics] == [("orders", (0, 1))]

    run(scenario())


def test_a_second_request_of_a_queued_transactional_id_follows_kafkas_rules() -> None:
    async def scenario():
        _, verifier, client = make(LEADERS)
        busy, tid = tid_led_by(LEADERS, THERE, "busy"), tid_led_by(LEADERS, THERE, "x")
        client.gate.clear()
        in_flight = asyncio.create_task(verifier.verify(busy, 1, 0, [TP], generic_errors=False))
        await client.arrived.wait()
        retried = asyncio.create_task(verifier.verify(tid, 5, 3, [TP], generic_errors=False))
        await asyncio.sleep(0)
        again = asyncio.create_task(verifier.verify(tid, 5, 3, [TP], generic_errors=False))  # same epoch
        await asyncio.sleep(0)
        assert await retried == {TP: E.network_exception}
        older = await verifier.verify(
            tid, 5, 2, [TP], generic_errors=False
        )  # lower epoch than the queued one
        assert older == {TP: E.invalid_producer_epoch}
        bumped = asyncio.create_task(verifier.verify(tid, 5, 4, [TP], generic_errors=False))
        await asyncio.sleep(0)
        assert await again == {TP: E.invalid_producer_epoch}  # fenced by the newer epoch
        client.gate.set()
        assert await in_flight == {} and await bumped == {}
        assert [t.producer_epoch for t in client.requests[1].transactions] == [4]

    run(scenario())


def test_failures_of_the_request_itself() -> None:
    async def scenario():
        _, verifier, client = make(LEADERS)
        tid = tid_led_by(LEADERS, THERE)
        client.fail = ConnectionError("refused")
        assert await verifier.verify(tid, 1, 0, [TP], generic_errors=True) == {TP: E.network_exception}
        client.fail = None
        client.top_level = E.cluster_authorization_failed
        assert await verifier.verify(tid, 1, 0, [TP], generic_errors=True) == {TP: E.invalid_txn_state}
        _, verifier, _ = make({0: -1, 1: -1, 2: -1, 3: -1})  # no leader: no coordinator to ask
        assert await verifier.verify(tid, 1, 0, [TP], generic_errors=True) == {
            TP: E.coordinator_not_available
        }

    run(scenario())


def test_verifications_are_timed_through_the_clock_and_unverified_partitions_counted() -> None:
    async def scenario():
        broker, verifier, client = make(LEADERS)
        here, there = tid_led_by(LEADERS, HERE), tid_led_by(LEADERS, THERE)
        broker.local_answers[here] = E.none
        assert await verifier.verify(here, 1, 0, [TP], generic_errors=True) == {}  # answered in process: 0 ms
        client.gate.clear()
        client.answers[there] = E.invalid_txn_state
        remote = asyncio.create_task(verifier.verify(there, 2, 0, [TP, ("orders", 1)], generic_errors=True))
        await client.arrived.wait()
        broker.clock.advance(40)
        client.gate.set()
        assert await remote == {TP: E.invalid_txn_state, ("orders", 1): E.invalid_txn_state}
        stats = verifier.stats
        assert (stats.count, stats.sum_ms, stats.max_ms, stats.failures) == (2, 40, 40, 2)
        assert stats.buckets[:6] == [1, 0, 0, 0, 0, 1]  # 0 ms <= 1 ms; 25 ms < 40 ms <= 50 ms
        _, unreachable, _ = make({0: -1, 1: -1, 2: -1, 3: -1})  # no coordinator: failed, never asked or timed
        await unreachable.verify(there, 1, 0, [TP], generic_errors=True)
        assert (unreachable.stats.count, unreachable.stats.failures) == (0, 1)

    run(scenario())


def test_what_produce_answers_for_each_verification_error() -> None:
    assert produce_error(E.invalid_txn_state).error_code == E.invalid_txn_state
    for retriable in (E.concurrent_transactions, E.network_exception, E.coordinator_load_in_progress,
                      E.coordinator_not_available, E.not_coordinator):  # fmt: skip
        assert produce_error(retriable).error_code == E.not_enough_replicas
    assert produce_error(E.invalid_producer_epoch).error_code == E.invalid_producer_epoch
    assert produce_error(E.transaction_abortable).error_code == E.transaction_abortable
