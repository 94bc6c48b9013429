"""Pages of lag monitoring and alerting (included at the root of console/urls.py)."""

from django.urls import path

from console.monitoring import views
from console.monitoring.metrics import metrics_view

cluster = "clusters/<int:cluster_id>/"

urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
    path("alerts/", views.alerts_page, name="alerts"),
    path("alerts/rules/new/", views.rule_create, name="alert_rule_create"),
    path("alerts/rules/<int:rule_id>/edit/", views.rule_edit, name="alert_rule_edit"),
    path("alerts/rules/<int:rule_id>/row/", views.rule_row, name="alert_rule_row"),
    path("alerts/rules/<int:rule_id>/delete/", views.rule_delete, name="alert_rule_delete"),
    path("alerts/silences/new/", views.silence_create, name="silence_create"),
    path("alerts/silences/<int:silence_id>/delete/", views.silence_delete, name="silence_delete"),
    path(cluster + "alerts/", views.cluster_alerts, name="cluster_alerts"),
    path(
        cluster + "lag/<path:group_id>/chart-<str:chart>.<str:fmt>",
        views.group_lag_image,
        name="group_lag_image",
    ),
    path(cluster + "lag/<path:group_id>/", views.group_lag, name="group_lag"),
    path(
        cluster + "rates/<str:topic>/chart-<str:chart>.<str:fmt>",
        views.topic_rates_image,
        name="topic_rates_image",
    ),
    path(cluster + "rates/<str:topic>/", views.topic_rates, name="topic_rates"),
]
