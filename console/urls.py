from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.decorators.http import require_POST

from console.audit import views as audit_views
from console.clusters import views as cluster_views
from console.groups import views as group_views
from console.operations import views as operation_views
from console.reports import views as report_views
from console.topics import views as topic_views

handler403 = "console.web.forbidden"

cluster_pages = [
    path("", cluster_views.overview, name="overview"),
    path("brokers/", cluster_views.broker_list, name="brokers"),
    path("brokers/add/", require_POST(cluster_views.broker_add), name="broker_add"),
    path(
        "brokers/self-healing/", require_POST(cluster_views.broker_self_healing), name="broker_self_healing"
    ),
    path("brokers/<int:broker_id>/", cluster_views.broker_detail, name="broker"),
    path("topics/", topic_views.topic_list, name="topics"),
    path("topics/new/", topic_views.topic_create, name="topic_create"),
    path("topics/<str:topic>/", topic_views.topic_detail, name="topic"),
    path("topics/<str:topic>/configs/", topic_views.topic_configs, name="topic_configs"),
    path("topics/<str:topic>/messages/", topic_views.topic_messages, name="topic_messages"),
    path("topics/<str:topic>/produce/", topic_views.topic_produce, name="topic_produce"),
    path("topics/<str:topic>/settings/", topic_views.topic_settings, name="topic_settings"),
    path(
        "topics/<str:topic>/partitions/",
        require_POST(topic_views.topic_add_partitions),
        name="topic_partitions",
    ),
    path(
        "topics/<str:topic>/delete-records/",
        require_POST(topic_views.topic_delete_records),
        name="topic_delete_records",
    ),
    path("topics/<str:topic>/delete/", require_POST(topic_views.topic_delete), name="topic_delete"),
    path("groups/", group_views.group_list, name="groups"),
    path("groups/<path:group_id>/reset-offsets/", group_views.group_reset, name="group_reset"),
    path("groups/<path:group_id>/delete/", require_POST(group_views.group_delete), name="group_delete"),
    path("groups/<path:group_id>/", group_views.group_detail, name="group"),
    path("reports/", report_views.report_list, name="reports"),
    path("reports/run/", require_POST(report_views.run_now), name="report_run_now"),
    path("reports/runs/<int:run_id>/", report_views.run_detail, name="report_run"),
    path("reports/runs/<int:run_id>/charts/<slug:name>.<str:fmt>", report_views.chart, name="report_chart"),
    path(
        "reports/schedules/<str:report>/",
        require_POST(report_views.schedule_update),
        name="report_schedule",
    ),
]

urlpatterns = [
    path("", cluster_views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("clusters/", cluster_views.cluster_list, name="clusters"),
    path("clusters/<int:cluster_id>/", include(cluster_pages)),
    path("operations/", operation_views.operation_list, name="operations"),
    path("operations/new/", operation_views.operation_new, name="operation_new"),
    path("operations/<int:operation_id>/", operation_views.operation_detail, name="operation"),
    path(
        "operations/<int:operation_id>/approve/",
        require_POST(operation_views.operation_approve),
        name="operation_approve",
    ),
    path(
        "operations/<int:operation_id>/cancel/",
        require_POST(operation_views.operation_cancel),
        name="operation_cancel",
    ),
    path("audit/", audit_views.audit_list, name="audit"),
    path("", include("console.monitoring.urls")),
    path("api/v1/", include("console.api_urls")),
    path("django-admin/", admin.site.urls),
]
