"""What every API view shares: pagination, the error format, and the cluster lookup.

Errors: 400 names the field (`{"partitions": ["must be at least 1"]}`) or says what was wrong
(`{"detail": ...}`); 401 without credentials; 403 with the role needed; 404 for an unknown cluster, topic or
group; 409 for a conflict (a topic that exists, a group with active members); 503 when the cluster does not
answer in time.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from console.clusters.models import Cluster
from console.errors import ConsoleError


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


def exception_handler(exc, context):
    if isinstance(exc, ConsoleError):
        return Response(exc.as_api_body(), status=exc.status)
    if isinstance(exc, DjangoValidationError):
        body = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DjangoPermissionDenied):
        return Response({"detail": str(exc) or "permission denied"}, status=status.HTTP_403_FORBIDDEN)
    return drf_exception_handler(exc, context)


def cluster_or_404(cluster_id) -> Cluster:
    return get_object_or_404(Cluster, pk=cluster_id)


def validated(serializer_class, data, **context):
    serializer = serializer_class(data=data, context=context)
    if not serializer.is_valid():
        raise ValidationError(serializer.errors)
    return serializer.validated_data


def paginate(view, request, items, serializer_class, **context):
    paginator = Pagination()
    page = paginator.paginate_queryset(items, request, view=view)
    data = serializer_class(page, many=True, context=context).data
    return paginator.get_paginated_response(data)
