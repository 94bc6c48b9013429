# Odradek: `make up` runs the platform, `make test` runs the tests. Both install what is missing first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# gcc, libc6-dev and python3-dev build the broker's one C extension (broker_runtime/protocol/_recordscan.c).
DEBIAN_PACKAGES := gcc libc6-dev python3-dev zookeeper redis-server chromium
JS_DIR := tests/integration/js

.PHONY: install java up cluster test chaos bench reports screenshots lint format clean

install: debian-packages java $(VENV)/.installed $(JS_DIR)/node_modules/.installed

$(VENV)/.installed: pyproject.toml setup.py broker_runtime/protocol/_recordscan.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

$(JS_DIR)/node_modules/.installed: $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	npm ci --prefix $(JS_DIR) --no-audit --no-fund --loglevel=error
	touch $@

# Debian packages for the cluster, the console and its browser tests; installed only when missing.
debian-packages:
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# PySpark (the report jobs) needs a Java runtime (17 or 21); Debian's headless JRE when none is on the PATH.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "installing Debian package: openjdk-17-jre-headless"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null; }

# Redis and ZooKeeper (if nothing answers on their ports), migrations, the admin user and the local three-broker
# cluster on the first run, the supervisor running its brokers, the console on http://127.0.0.1:8000, a Celery
# worker and beat, until Ctrl-C.
up: install
	$(PY) manage.py up

# ZooKeeper and three brokers in the foreground (deploy/cluster.py); Ctrl-C stops them. Data in var/cluster.
cluster: install
	$(PY) deploy/cluster.py

test: install
	$(PY) -m pytest

# The fault test's long form: CHAOS_SECONDS of faults chosen at random (seed CHAOS_SEED, random when unset) against
# a three-broker cluster; the history's verdict is written to bench/results/chaos-<time>.json.
CHAOS_SECONDS ?= 600
chaos: install
	CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_SEED=$${CHAOS_SEED:-$$RANDOM$$RANDOM} \
	CHAOS_RESULT=bench/results/chaos-$$(date -u +%Y%m%dT%H%M%SZ).json \
	$(PY) -m pytest -q -s --timeout=0 tests/integration/cluster/test_chaos.py

bench: install
	$(PY) bench/run.py
	$(PY) bench/jobs_bench.py
	$(PY) bench/cleaner_bench.py
	$(PY) bench/txn_bench.py
	$(PY) bench/console.py
	$(PY) bench/lag_sampler.py
	$(PY) bench/metrics_cost.py
	$(PY) bench/operations.py
	$(PY) bench/cluster_bench.py

# The three PySpark reports against a running cluster, into var/reports/<report>/<time>/.
REPORT_ARGS ?= --bootstrap-servers 127.0.0.1:9092 --since 24h
reports: install
	@failed=""; for r in throughput lag retention; do \
	  $(PY) -m jobs.$${r}_report $(REPORT_ARGS) || failed="$$failed $$r"; done; \
	if [ -n "$$failed" ]; then echo "reports failed:$$failed"; exit 1; fi

# The console's main pages, from its browser tests, as PNGs in docs/screenshots/.
screenshots: install
	ODRADEK_SCREENSHOTS=docs/screenshots $(PY) -m pytest -q tests/console/test_console_browser.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check broker_runtime jobs

format: $(VENV)/.installed
	$(VENV)/bin/ruff format broker_runtime jobs tests bench
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf var/ .pytest_cache
