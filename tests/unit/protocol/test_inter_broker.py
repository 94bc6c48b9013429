"""The controller's request schemas (written with kio's primitives): golden bytes read off Kafka 3.9's message
specs, and round trips through kio's reader and writer, with the client-side framing around them."""

from __future__ import annotations

import io
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from broker_runtime.protocol import inter_broker as ib
from broker_runtime.protocol.client import decode_response, encode_request, response_correlation_id
from broker_runtime.protocol.framing import decode_body, parse_header


def encode(entity) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def decode(cls, data: bytes):
    value, size = entity_reader(cls)(memoryview(data), 0)
    assert size == len(data)
    return value


def test_stop_replica_v4_golden_bytes() -> None:
    request = ib.StopReplicaRequest(
        controller_id=1, controller_epoch=5, broker_epoch=42,
        topic_states=(ib.StopReplicaTopicState(topic_name="t", partition_states=(
            ib.StopReplicaPartitionState(partition_index=0, leader_epoch=3, delete_partition=True),
        )),),
    )  # fmt: skip
    expected = bytes.fromhex(
        "00000001"  # ControllerId
        "00"  # isKRaftController
        "00000005"  # ControllerEpoch
        "000000000000002a"  # BrokerEpoch
        "02"  # TopicStates: compact array of 1
        "0274"  # TopicName "t"
        "02"  # PartitionStates: compact array of 1
        "00000000"  # PartitionIndex
        "00000003"  # LeaderEpoch
        "01"  # DeletePartition
        "00"  # partition tagged fields
        "00"  # topic tagged fields
        "00"  # request tagged fields
    )
    assert encode(request) == expected
    assert decode(ib.StopReplicaRequest, expected) == request


def test_controlled_shutdown_v3_golden_bytes() -> None:
    request = ib.ControlledShutdownRequest(broker_id=2, broker_epoch=0x1234)
    expected = bytes.fromhex("00000002000000000000123400")  # BrokerId, BrokerEpoch, tagged fields
    assert encode(request) == expected
    response = ib.ControlledShutdownResponse(
        error_code=ErrorCode.none,
        remaining_partitions=(ib.RemainingPartition(topic_name="ab", partition_index=7),),
    )
    assert encode(response) == bytes.fromhex("000002036162000000070000")


def test_leader_and_isr_round_trip() -> None:
    topic_id = uuid.uuid4()
    request = ib.LeaderAndIsrRequest(
        controller_id=1, controller_epoch=3, broker_epoch=77, type=ib.LEADER_AND_ISR_FULL,
        topic_states=(ib.LeaderAndIsrTopicState(topic_name="orders", topic_id=topic_id, partition_states=(
            ib.LeaderAndIsrPartitionState(
                partition_index=0, controller_epoch=3, leader=2, leader_epoch=9, isr=(2, 3),
                partition_epoch=14, replicas=(2, 3, 4), adding_replicas=(4,), removing_replicas=(),
                is_new=True, leader_recovery_state=0,
            ),
        )),),
        live_leaders=(ib.LeaderAndIsrLiveLeader(broker_id=2, host_name="127.0.0.1", port=9093),),
    )  # fmt: skip
    assert decode(ib.LeaderAndIsrRequest, encode(request)) == request
    response = ib.LeaderAndIsrResponse(
        error_code=ErrorCode.none,
        topics=(ib.LeaderAndIsrTopicError(topic_id=topic_id, partition_errors=(
            ib.LeaderAndIsrPartitionError(partition_index=0, error_code=ErrorCode.kafka_storage_error),
        )),),
    )  # fmt: skip
    assert decode(ib.LeaderAndIsrResponse, encode(response)) == response


def test_update_metadata_round_trip_with_null_rack_and_delete_marker() -> None:
    request = ib.UpdateMetadataRequest(
        controller_id=0, controller_epoch=1, broker_epoch=-1,
        topic_states=(ib.UpdateMetadataTopicState(topic_name="gone", topic_id=uuid.uuid4(), partition_states=(
            ib.UpdateMetadataPartitionState(
                partition_index=1, controller_epoch=1, leader=-2, leader_epoch=4, isr=(0,), zk_version=3,
                replicas=(0, 1), offline_replicas=(1,),
            ),
        )),),
        live_brokers=(
            ib.UpdateMetadataBroker(id=0, endpoints=(
                ib.UpdateMetadataEndpoint(port=9092, host="10.0.0.1", listener="PLAINTEXT", security_protocol=0),
            ), rack=None),
            ib.UpdateMetadataBroker(id=1, endpoints=(), rack="r1"),
        ),
    )  # fmt: skip
    assert decode(ib.UpdateMetadataRequest, encode(request)) == request


@pytest.mark.parametrize(("key", "version"), sorted(ib.SCHEMAS))
def test_request_frames_decode_through_the_broker_framing(key: int, version: int) -> None:
    request_cls, _ = ib.SCHEMAS[(key, version)]
    samples = {
        ib.LeaderAndIsrRequest: ib.LeaderAndIsrRequest(
            controller_id=1, controller_epoch=2, topic_states=(), live_leaders=()
        ),
        ib.UpdateMetadataRequest: ib.UpdateMetadataRequest(
            controller_id=1, controller_epoch=2, topic_states=(), live_brokers=()
        ),
        ib.StopReplicaRequest: ib.StopReplicaRequest(controller_id=1, controller_epoch=2, topic_states=()),
        ib.ControlledShutdownRequest: ib.ControlledShutdownRequest(broker_id=3, broker_epoch=5),
    }
    request = samples[request_cls]
    frame = encode_request(request, correlation_id=99, client_id="controller-1")
    body = memoryview(frame)[4:]
    header, pos = parse_header(body)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        key,
        version,
        99,
        "controller-1",
    )
    assert decode_body(header, body, pos) == request


def test_response_frames_decode_on_the_client_side() -> None:
    response = ib.UpdateMetadataResponse(error_code=ErrorCode.stale_controller_epoch)
    frame = (42).to_bytes(4, "big") + b"\x00" + encode(response)  # correlation id, tagged fields, body
    assert response_correlation_id(frame) == 42
    assert decode_response(frame, ib.UPDATE_METADATA, 8) == response
