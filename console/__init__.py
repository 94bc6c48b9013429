"""The Odradek console: a Django project whose apps are the console's features.

Importing the package loads the Celery app, so that `@shared_task` functions bind to it and
`celery -A console worker` finds it.
"""

from console.celery import app as celery_app

__all__ = ["celery_app"]
