"""Models and the operation state table, on the database (pytest-django)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from console.clusters.models import Cluster, validate_host_ports, validate_zookeeper_connect
from console.operations.models import Kind, Operation
from console.operations.states import FINAL, VALID_PREVIOUS, IllegalTransition, State, check


def test_every_state_has_a_row_and_final_states_lead_nowhere():
    assert set(VALID_PREVIOUS) == set(State)
    for state in FINAL:
        assert all(state not in previous for previous in VALID_PREVIOUS.values())


@pytest.mark.parametrize(
    ("current", "new", "legal"),
    [
        (State.PROPOSED, State.APPROVED, True),
        (State.APPROVED, State.RUNNING, True),
        (State.RUNNING, State.DONE, True),
        (State.RUNNING, State.FAILED, True),
        (State.PROPOSED, State.CANCELLED, True),
        (State.PROPOSED, State.RUNNING, False),
        (State.DONE, State.RUNNING, False),
        (State.CANCELLED, State.APPROVED, False),
        (State.FAILED, State.DONE, False),
    ],
)
def test_transition_table(current, new, legal):
    if legal:
        check(current, new)
    else:
        with pytest.raises(IllegalTransition):
            check(current, new)


@pytest.fixture
def operation(db):
    cluster = Cluster.objects.create(name="c1", bootstrap_servers="127.0.0.1:9092")
    return Operation.objects.create(
        kind=Kind.CREATE_TOPIC, cluster=cluster, state=State.APPROVED, params={"name": "t"}
    )


def test_transition_is_a_compare_and_set_on_the_row(operation):
    stale = Operation.objects.get(pk=operation.pk)
    operation.transition(State.RUNNING)
    assert Operation.objects.get(pk=operation.pk).state == State.RUNNING
    # another holder of the row, still thinking it is approved, cannot start it a second time
    with pytest.raises(IllegalTransition) as raised:
        stale.transition(State.RUNNING)
    assert raised.value.current == State.RUNNING
    operation.transition(State.DONE, progress=100)
    row = Operation.objects.get(pk=operation.pk)
    assert (row.state, row.progress, row.is_final) == (State.DONE, 100, True)
    assert row.finished_at is not None


def test_steps_are_appended_and_found(operation):
    operation.record_step("created", "3 partitions", progress=10)
    operation.record_step("leaders", progress=150)
    row = Operation.objects.get(pk=operation.pk)
    assert [s["step"] for s in row.steps] == ["created", "leaders"]
    assert row.progress == 100
    assert row.has_step("created") and not row.has_step("verified")


@pytest.mark.parametrize("value", ["127.0.0.1:9092", "a:1,b.example.com:9093", "[::1]:9092"])
def test_host_ports_accepted(value):
    validate_host_ports(value)


@pytest.mark.parametrize("value", ["", "127.0.0.1", "host:99999", "a:1,", "http://a:1"])
def test_host_ports_refused(value):
    with pytest.raises(ValidationError):
        validate_host_ports(value)


def test_zookeeper_connect_with_chroot():
    validate_zookeeper_connect("z1:2181,z2:2181/kafka/prod")
    with pytest.raises(ValidationError):
        validate_zookeeper_connect("z1:2181/bad chroot")
