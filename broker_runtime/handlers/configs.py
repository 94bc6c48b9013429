"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and brokers."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from broker_runtime.cluster.topics import validate_topic_name
from broker_runtime.config import (
    ConfigError,
    ConfigType,
    broker_config_def,
    describe_broker_configs,
    describe_topic_configs,
    topic_config_def,
)
from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _broker_entity(ctx: RequestContext, resource_name: str) -> str:
    """ "" is the cluster-wide default; otherwise the name must be this broker's id."""
    if resource_name not in ("", str(ctx.broker.broker_id)):
        raise KafkaError(
            ErrorCode.invalid_request, f"broker {resource_name!r} is not this broker ({ctx.broker.broker_id})"
        )
    return resource_name


def _topic(ctx: RequestContext, name: str):
    validate_topic_name(name)
    topic = ctx.broker.metadata.topics().get(name)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
    return topic


async def handle_describe_configs(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    types = ctx.response_types()
    include_docs = getattr(request, "include_documentation", False)
    results = []
    for res in request.resources:
        names = list(res.configuration_keys) if res.configuration_keys else None
        try:
            if res.resource_type == TOPIC:
                entries = describe_topic_configs(
                    broker.config,
                    _topic(ctx, res.resource_name).configs,
                    request.include_synonyms,
                    include_docs,
                    names,
                )
            elif res.resource_type == BROKER:
                entity = _broker_entity(ctx, res.resource_name)
                entries = describe_broker_configs(
                    broker.config, request.include_synonyms, include_docs, names, cluster_default=entity == ""
                )
            else:
                raise KafkaError(
                    ErrorCode.invalid_request, f"resource type {res.resource_type} is not supported"
                )
            configs = tuple(
                make(
                    types.DescribeConfigsResourceResult, name=e.name, value=e.value, read_only=e.read_only,
                    config_source=int(e.source), is_sensitive=e.is_sensitive, is_default=e.source == 5,
                    synonyms=tuple(
                        make(types.DescribeConfigsSynonym, name=s.name, value=s.value, source=int(s.source))
                        for s in e.synonyms
                    ),
                    config_type=int(e.config_type), documentation=e.documentation,
                )
                for e in entries
            )  # fmt: skip
            results.append(make(
                types.DescribeConfigsResult, error_code=ErrorCode.none, error_message=None,
                resource_type=res.resource_type, resource_name=res.resource_name, configs=configs,
            ))  # fmt: skip
        except KafkaError as exc:
            results.append(make(
                types.DescribeConfigsResult, error_code=exc.error_code, error_message=exc.message,
                resource_type=res.resource_type, resource_name=res.resource_name, configs=(),
            ))  # fmt: skip
    return make(types.DescribeConfigsResponse, throttle_time=_ZERO, results=tuple(results))


async def _apply(
    ctx: RequestContext, resource_type: int, resource_name: str, configs: dict[str, str], validate_only: bool
):
    broker = ctx.broker
    if resource_type == TOPIC:
        _topic(ctx, resource_name)
        await broker.set_topic_configs(resource_name, configs, validate_only)
    elif resource_type == BROKER:
        await broker.set_broker_configs(_broker_entity(ctx, resource_name), configs, validate_only)
    else:
        raise KafkaError(ErrorCode.invalid_request, f"resource type {resource_type} is not supported")


def _alter_response(types, results) -> object:
    name = (
        "AlterConfigsResponse"
        if hasattr(types, "AlterConfigsResponse")
        else "IncrementalAlterConfigsResponse"
    )
    return make(
        getattr(types, name), throttle_time=_ZERO,
        responses=tuple(
            make(types.AlterConfigsResourceResponse, error_code=code, error_message=message,
                 resource_type=rtype, resource_name=rname)
            for code, message, rtype, rname in results
        ),
    )  # fmt: skip


async def handle_alter_configs(ctx: RequestContext, request) -> object:
    """Legacy AlterConfigs replaces the resource's whole set of overrides."""
    types = ctx.response_types()
    results = []
    for res in request.resources:
        try:
            configs = {c.name: c.value for c in res.configs if c.value is not None}
            await _apply(ctx, res.resource_type, res.resource_name, configs, request.validate_only)
            results.append((ErrorCode.none, None, res.resource_type, res.resource_name))
        except KafkaError as exc:
            results.append((exc.error_code, exc.message, res.resource_type, res.resource_name))
    return _alter_response(types, results)


async def handle_incremental_alter_configs(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    results = []
    for res in request.resources:
        try:
            configs = _incremental(ctx, res)
            await _apply(ctx, res.resource_type, res.resource_name, configs, request.validate_only)
            results.append((ErrorCode.none, None, res.resource_type, res.resource_name))
        except KafkaError as exc:
            results.append((exc.error_code, exc.message, res.resource_type, res.resource_name))
    return _alter_response(types, results)


def _incremental(ctx: RequestContext, res) -> dict[str, str]:
    """The resource's new overrides after applying SET, DELETE, APPEND and SUBTRACT in order."""
    broker = ctx.broker
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.invalid_request, "a config appears more than once for one resource")
    if res.resource_type == TOPIC:
        current = dict(_topic(ctx, res.resource_name).configs)
        config_def = topic_config_def
    elif res.resource_type == BROKER:
        entity = _broker_entity(ctx, res.resource_name)
        current = broker.config.dynamic_configs(cluster_default=entity == "")
        config_def = broker_config_def
    else:
        raise KafkaError(ErrorCode.invalid_request, f"resource type {res.resource_type} is not supported")
    for c in res.configs:
        op = c.config_operation
        try:
            # The same error as AlterConfigs: unknown, or a Kafka key of a feature Odradek does not build.
            definition = config_def(c.name)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        if op == SET:
            if c.value is None:
                raise KafkaError(ErrorCode.invalid_config, f"{c.name}: SET needs a value")
            current[c.name] = c.value
        elif op == DELETE:
            current.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if definition.type != ConfigType.LIST:
                raise KafkaError(
                    ErrorCode.invalid_config, f"{c.name}: APPEND and SUBTRACT apply only to list configs"
                )
            # Kafka starts from the current override, else the config's own default (not a broker synonym).
            base = current.get(c.name, definition.format(definition.default)) or ""
            items = [x.strip() for x in base.split(",") if x.strip()]
            change = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == APPEND:
                items += [x for x in change if x not in items]
            else:
                items = [x for x in items if x not in change]
            current[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"{c.name}: unknown config operation {op}")
    return current
