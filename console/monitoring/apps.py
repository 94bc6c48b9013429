from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "console.monitoring"
    label = "monitoring"
    verbose_name = "Lag monitoring and alerts"
