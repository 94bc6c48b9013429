import datetime as dt

from django import template

register = template.Library()


@register.filter
def ms_time(value) -> str:
    """Milliseconds since the epoch as a UTC time."""
    if value is None:
        return ""
    return dt.datetime.fromtimestamp(int(value) / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
