"""Settings of the console, read from the environment with defaults for a development machine.

Environment: DJANGO_SECRET_KEY, DJANGO_DEBUG (1/0), DJANGO_ALLOWED_HOSTS (comma-separated), DATABASE_URL
(default SQLite in var/console/), REDIS_URL (Celery's broker), CONSOLE_STATIC_ROOT, CONSOLE_KAFKA_TIMEOUT_S.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CONSOLE_VAR_DIR", BASE_DIR / "var" / "console"))


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name} must be 1/0/true/false, not {value!r}")


DEBUG = _flag("DJANGO_DEBUG", True)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ValueError("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG=0")
    SECRET_KEY = "development-only-secret-key-not-for-production"
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_celery_beat",
    "console.clusters",
    "console.topics",
    "console.groups",
    "console.audit",
    "console.operations",
    "console.monitoring",
    "console.reports",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.access.role_context",
            ],
        },
    },
]

# SQLite by default; PostgreSQL (or anything dj-database-url knows) through DATABASE_URL.
DATABASES = {
    "default": dj_database_url.config(
        env="DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'console.sqlite3'}", conn_max_age=60
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web server, the Celery worker and beat read while one of them writes; writers wait
    # up to `timeout` seconds for the lock instead of failing at once. Transactions take the write lock
    # when they begin: a deferred one that read first cannot wait for it and fails with "database is
    # locked" when another connection wrote in between.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["TEST"] = {
        # A file, not memory: the Celery worker of the integration tests opens the same test database.
        "NAME": os.environ.get("CONSOLE_TEST_DATABASE", str(VAR_DIR / f"test-{os.getpid()}.sqlite3")),
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("CONSOLE_STATIC_ROOT", BASE_DIR / "var" / "static"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["console.access.RolePermission"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "console.api.Pagination",
    "EXCEPTION_HANDLER": "console.api.exception_handler",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Odradek admin API",
    "DESCRIPTION": "Clusters, brokers, topics, messages, consumer groups, operations and the audit trail. "
    "Authenticate with a session or `Authorization: Token <key>` (`manage.py drf_create_token USER`).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"EncodingEnum": "console.topics.messages.ENCODINGS"},
}

# Celery: Redis as the broker; no result backend (operations keep their state in the database).
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "publish-audit-entries": {"task": "console.audit.tasks.publish_pending", "schedule": 30.0},
    "refresh-group-lag": {"task": "console.groups.tasks.refresh_all_lag", "schedule": 30.0},
    "resume-stalled-operations": {"task": "console.operations.tasks.resume_stalled", "schedule": 15.0},
    "watch-brokers-for-failover": {"task": "console.operations.tasks.watch_brokers", "schedule": 5.0},
    # samples each cluster whose own interval (SamplerConfig.interval_s, 30 s by default) has passed
    "sample-lag": {"task": "console.monitoring.tasks.sample_due", "schedule": 5.0},
}
CELERY_TIMEZONE = TIME_ZONE

# How long one admin request to a cluster may take before the page says the cluster is unreachable.
CONSOLE_KAFKA_TIMEOUT_S = float(os.environ.get("CONSOLE_KAFKA_TIMEOUT_S", "10"))
# Managed clusters: where their brokers' files live, and the ZooKeeper new clusters use (each in its chroot).
CONSOLE_CLUSTERS_DIR = Path(os.environ.get("CONSOLE_CLUSTERS_DIR", BASE_DIR / "var" / "clusters"))
CONSOLE_ZOOKEEPER = os.environ.get("CONSOLE_ZOOKEEPER", "127.0.0.1:2181")
# The Celery queue operation tasks go to.
CONSOLE_OPERATIONS_QUEUE = os.environ.get("CONSOLE_OPERATIONS_QUEUE", "celery")
# A running operation whose worker has not heartbeaten for this long is taken over by another worker.
CONSOLE_OPERATION_LEASE_S = float(os.environ.get("CONSOLE_OPERATION_LEASE_S", "20"))
# The audit topic each cluster receives its audit entries on (one partition, 90 days, never compacted).
CONSOLE_AUDIT_TOPIC = os.environ.get("CONSOLE_AUDIT_TOPIC", "__odradek_audit")

# Lag monitoring: how long sampled offsets are kept, the alert notifications' rate limit per rule, and the
# bearer token /metrics asks for (empty: no token).
CONSOLE_LAG_RETENTION_S = int(os.environ.get("CONSOLE_LAG_RETENTION_S", "3600"))
CONSOLE_ALERT_NOTIFICATIONS_PER_HOUR = int(os.environ.get("CONSOLE_ALERT_NOTIFICATIONS_PER_HOUR", "20"))
CONSOLE_METRICS_TOKEN = os.environ.get("CONSOLE_METRICS_TOKEN", "")
# Alert emails go through Django's SMTP backend to CONSOLE_EMAIL_HOST:CONSOLE_EMAIL_PORT.
DEFAULT_FROM_EMAIL = os.environ.get("CONSOLE_FROM_EMAIL", "odradek-console@localhost")
EMAIL_HOST = os.environ.get("CONSOLE_EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("CONSOLE_EMAIL_PORT", "25"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("CONSOLE_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}, "kafka": {"level": "WARNING"}},
}

if not DEBUG:
    SESSION_COOKIE_SECURE = _flag("DJANGO_SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

VAR_DIR.mkdir(parents=True, exist_ok=True)
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
