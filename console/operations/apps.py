from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "console.operations"
    label = "operations"
