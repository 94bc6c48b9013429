"""/api/v1/: the admin API (DRF). Its OpenAPI schema is /api/v1/schema/, browsable at /api/v1/docs/."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny

from console.audit import api as audit
from console.clusters import api as clusters
from console.groups import api as groups
from console.monitoring import api as monitoring
from console.operations import api as operations
from console.reports import api as reports
from console.topics import api as topics

public = {"permission_classes": [AllowAny]}
cluster = "clusters/<int:cluster_id>/"
topic = cluster + "topics/<str:topic>/"
group = cluster + "groups/<path:group_id>/"

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(**public), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema", **public), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema", **public), name="api-redoc"),
    path("me/", clusters.MeView.as_view(), name="api-me"),
    path("clusters/", clusters.ClusterListView.as_view(), name="api-clusters"),
    path("clusters/provision/", clusters.ProvisionView.as_view(), name="api-provision"),
    path(cluster, clusters.ClusterDetailView.as_view(), name="api-cluster"),
    path(cluster + "managed-brokers/", clusters.ManagedBrokerListView.as_view(), name="api-managed-brokers"),
    path(cluster + "overview/", clusters.OverviewView.as_view(), name="api-overview"),
    path(cluster + "brokers/", clusters.BrokerListView.as_view(), name="api-brokers"),
    path(cluster + "brokers/<int:broker_id>/", clusters.BrokerDetailView.as_view(), name="api-broker"),
    path(
        cluster + "brokers/<int:broker_id>/configs/",
        clusters.BrokerConfigsView.as_view(),
        name="api-broker-configs",
    ),
    path(cluster + "topics/", topics.TopicListView.as_view(), name="api-topics"),
    path(topic, topics.TopicDetailView.as_view(), name="api-topic"),
    path(topic + "configs/", topics.TopicConfigsView.as_view(), name="api-topic-configs"),
    path(topic + "partitions/", topics.TopicPartitionsView.as_view(), name="api-topic-partitions"),
    path(topic + "messages/", topics.MessagesView.as_view(), name="api-topic-messages"),
    path(topic + "delete-records/", topics.DeleteRecordsView.as_view(), name="api-topic-delete-records"),
    path(cluster + "groups/", groups.GroupListView.as_view(), name="api-groups"),
    path(group + "reset-offsets/", groups.ResetOffsetsView.as_view(), name="api-group-reset"),
    path(group, groups.GroupDetailView.as_view(), name="api-group"),
    path(cluster + "reports/runs/", reports.ReportRunListView.as_view(), name="api-report-runs"),
    path(cluster + "reports/runs/<int:run_id>/", reports.ReportRunDetailView.as_view(), name="api-report-run"),
    path(cluster + "reports/schedules/", reports.ScheduleListView.as_view(), name="api-report-schedules"),
    path(
        cluster + "reports/schedules/<str:report>/",
        reports.ScheduleDetailView.as_view(),
        name="api-report-schedule",
    ),
    path("operations/", operations.OperationListView.as_view(), name="api-operations"),
    path("operations/<int:operation_id>/", operations.OperationDetailView.as_view(), name="api-operation"),
    path(
        "operations/<int:operation_id>/approve/",
        operations.OperationApproveView.as_view(),
        name="api-operation-approve",
    ),
    path(
        "operations/<int:operation_id>/cancel/",
        operations.OperationCancelView.as_view(),
        name="api-operation-cancel",
    ),
    path("audit/", audit.AuditListView.as_view(), name="api-audit"),
    path("alerts/", monitoring.AlertListView.as_view(), name="api-alerts"),
    path("alerts/rules/", monitoring.RuleListView.as_view(), name="api-alert-rules"),
    path("alerts/rules/<int:rule_id>/", monitoring.RuleDetailView.as_view(), name="api-alert-rule"),
    path("alerts/silences/", monitoring.SilenceListView.as_view(), name="api-silences"),
    path("alerts/silences/<int:silence_id>/", monitoring.SilenceDetailView.as_view(), name="api-silence"),
    path(cluster + "sampler/", monitoring.SamplerView.as_view(), name="api-sampler"),
    path(cluster + "lag/<path:group_id>/", monitoring.GroupLagView.as_view(), name="api-group-lag"),
]
