"""ApiVersions: the advertised version table and feature levels."""

from __future__ import annotations

import datetime
import re

from kio.schema.api_versions.v0 import response as v0
from kio.schema.errors import ErrorCode

from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.apis import FINALIZED_FEATURES, FINALIZED_FEATURES_EPOCH, SUPPORTED_FEATURES
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)
FEATURES_SINCE = 3


def _api_keys(module, versions: dict[int, tuple[int, int]]) -> tuple:
    return tuple(
        make(module.ApiVersion, api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(versions.items())
    )


def unsupported_version_response(versions: dict[int, tuple[int, int]]) -> v0.ApiVersionsResponse:
    return v0.ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=_api_keys(v0, versions))


# ApiVersionsRequest.isValid: the client's software name and version (v3+) must look like identifiers.
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


async def handle_api_versions(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    valid = all(
        _SOFTWARE.match(getattr(request, field, "x") or "")
        for field in ("client_software_name", "client_software_version")
    )
    if not valid:
        # Kafka's error response: the error and the version table, nothing else.
        return make(
            types.ApiVersionsResponse, error_code=ErrorCode.invalid_request,
            api_keys=_api_keys(types, ctx.broker.dispatcher.versions), throttle_time=_ZERO,
        )  # fmt: skip
    # Features arrive with v3; before v4 a feature whose minimum is 0 is left out: clients fail to parse it
    # (KAFKA-17011).
    with_features = ctx.api_version >= FEATURES_SINCE
    supported = {
        name: (low, high)
        for name, (low, high) in SUPPORTED_FEATURES.items()
        if with_features and (low > 0 or ctx.api_version >= 4)
    }
    finalized = FINALIZED_FEATURES if with_features else {}
    return make(
        types.ApiVersionsResponse,
        error_code=ErrorCode.none,
        api_keys=_api_keys(types, ctx.broker.dispatcher.versions),
        throttle_time=_ZERO,
        supported_features=tuple(
            make(types.SupportedFeatureKey, name=name, min_version=low, max_version=high)
            for name, (low, high) in supported.items()
        ),
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=tuple(
            make(types.FinalizedFeatureKey, name=name, min_version_level=level, max_version_level=level)
            for name, level in finalized.items()
        ),
        zk_migration_ready=False,
    )
