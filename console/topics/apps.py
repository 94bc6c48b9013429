from django.apps import AppConfig


class TopicsConfig(AppConfig):
    name = "console.topics"
    label = "topics"
