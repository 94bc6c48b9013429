from django.apps import AppConfig


class GroupsConfig(AppConfig):
    name = "console.groups"
    label = "groups"
