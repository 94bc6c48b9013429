#!/bin/sh
# The console in production: collect static files (served by WhiteNoise), migrate, then gunicorn on the WSGI app.
# Environment: DJANGO_SECRET_KEY (required), DJANGO_DEBUG=0, DJANGO_ALLOWED_HOSTS, DATABASE_URL, REDIS_URL,
# CONSOLE_BIND (default 127.0.0.1:8000), CONSOLE_WORKERS (default 3).
set -eu
cd "$(dirname "$0")/.."
export DJANGO_DEBUG="${DJANGO_DEBUG:-0}"
PY="${PYTHON:-.venv/bin/python}"
"$PY" manage.py collectstatic --noinput --verbosity 0
"$PY" manage.py migrate --noinput
exec "$PY" -m gunicorn console.wsgi:application \
  --bind "${CONSOLE_BIND:-127.0.0.1:8000}" --workers "${CONSOLE_WORKERS:-3}" --threads 4 \
  --timeout 60 --access-logfile - --error-logfile -
