"""/api/v1/: the admin API (DRF). Its OpenAPI schema is /api/v1/schema/, browsable at /api/v1/docs/."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny

from console.clusters import api as clusters

public = {"permission_classes": [AllowAny]}

cluster = "clusters/<int:cluster_id>/"

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(**public), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema", **public), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema", **public), name="api-redoc"),
    path("clusters/", clusters.ClusterListView.as_view(), name="api-clusters"),
    path(cluster, clusters.ClusterDetailView.as_view(), name="api-cluster"),
    path(cluster + "overview/", clusters.OverviewView.as_view(), name="api-overview"),
    path(cluster + "brokers/", clusters.BrokerListView.as_view(), name="api-brokers"),
    path(cluster + "brokers/<int:broker_id>/", clusters.BrokerDetailView.as_view(), name="api-broker"),
    path(
        cluster + "brokers/<int:broker_id>/configs/",
        clusters.BrokerConfigsView.as_view(),
        name="api-broker-configs",
    ),
]
