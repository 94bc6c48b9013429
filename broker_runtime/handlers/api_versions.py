"""ApiVersions: the advertised version table."""

from __future__ import annotations

import datetime
import re

from kio.schema.api_versions.v0 import response as v0
from kio.schema.errors import ErrorCode

from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)


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
    return make(
        types.ApiVersionsResponse,
        error_code=ErrorCode.none if valid else ErrorCode.invalid_request,
        api_keys=_api_keys(types, ctx.broker.dispatcher.versions),
        throttle_time=_ZERO,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )
