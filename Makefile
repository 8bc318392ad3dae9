# The README's two commands: `make run` and `make test`. Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export DAGSTER_HOME ?= $(CURDIR)/var/dagster
export TORCHCI_ARCHIVE_URI ?= $(CURDIR)/var/archive
export TORCHCI_LAKE_URI ?= $(CURDIR)/var/lake
export TORCHCI_OUTPUTS_URI ?= $(CURDIR)/var/outputs

.PHONY: install run test dev serve bench bench-logs bench-shards bench-memory bench-callbacks bench-serve bench-relay-latency bench-freshness bench-increment bench-extracts bench-s3-refresh bench-drci bench-backfill bench-gap-repair bench-search bench-ui-run eval eval-guardians eval-lifecycle screenshots docs-tables clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the project's metadata changes (the package is installed editable).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "installing torchci-dagster and its dependencies into $(VENV) (log: $(VENV)/install.log)"
	@$(BIN)/pip install -e '.[dev]' > $(VENV)/install.log 2>&1 || { tail -40 $(VENV)/install.log; exit 1; }
	@touch $@

install: $(VENV)/.installed $(DAGSTER_HOME)/dagster.yaml

# The instance's dagster.yaml follows the repository's template, unless it is no longer the copy make
# installed (dagster.postgres.yaml copied in, or edited by hand): that one is kept, and said so. An
# instance installed before make kept its copy is taken for make's unless it is a PostgreSQL one.
$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	@if [ ! -e $@ ] || cmp -s $@ $(DAGSTER_HOME)/.dagster.yaml.installed \
			|| { [ ! -e $(DAGSTER_HOME)/.dagster.yaml.installed ] && ! grep -q DAGSTER_PG $@; }; then \
		cp dagster.yaml $@ && cp dagster.yaml $(DAGSTER_HOME)/.dagster.yaml.installed; \
	else \
		echo "keeping $@ (not the template make installed: dagster.postgres.yaml, or edited); compare it with ./dagster.yaml"; \
		touch $@; \
	fi

# The sample archive only where there is no archive: neither webhooks nor a backfill's cursor (a
# backfill that read no webhook yet must not be mixed with simulated pytorch/pytorch days).
run: install
	@if [ ! -d "$(TORCHCI_ARCHIVE_URI)/webhooks" ] && [ ! -d "$(TORCHCI_ARCHIVE_URI)/backfill" ]; then \
	  $(BIN)/torchci simulate --out "$(TORCHCI_ARCHIVE_URI)" --days 3; fi
	$(BIN)/torchci run

# Three pytest workers per two cores: a quarter of a test's time is spent waiting (for a `dagster
# dev`, a subprocess, a server), which a third worker fills (bench/README.md, "The test suite").
# Each test file runs whole on one worker, so a module's fixtures (a simulated archive, a `dagster
# dev`) are built once. TEST_WORKERS=0 runs in this process.
# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set: each worker collects every test
# file, and ~200 `torchci`, `dagster` and helper processes import the project, which would
# otherwise each compile it again (6 CPU-s more per collection, 0.3 s per process).
TEST_WORKERS ?= $(shell python3 -c 'import os; print(max(1, (os.cpu_count() or 1) * 3 // 2))')
test: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The ports, for a second checkout or a port already taken: `make dev DEV_PORT=3001`.
DEV_PORT ?= 3000
SERVE_PORT ?= 8080

# Started in DAGSTER_HOME, the instance's folder: from here Dagster would note on every start that
# the repository's dagster.yaml (the template copied there) is not the one in use.
# A job a script starts in the background inherits SIGINT ignored, and Dagster answers SIGTERM with
# its SIGINT handler, so it would ignore `kill -TERM` too: SIGINT is set back to its default first.
WITH_DEFAULT_SIGINT = "$(abspath $(BIN))/python" -c 'import os, signal, sys; \
	signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])'
dev: install
	cd "$(DAGSTER_HOME)" && exec $(WITH_DEFAULT_SIGINT) "$(abspath $(BIN))/dagster" dev \
		-w "$(CURDIR)/workspace.yaml" -h 127.0.0.1 -p $(DEV_PORT)

# The webhook and relay-callback receiver (docs/relay.md, "Receiving webhooks"); needs TORCHCI_WEBHOOK_SECRETS.
serve: install
	$(BIN)/torchci serve --host 127.0.0.1 --port $(SERVE_PORT)

bench: install
	$(BIN)/python bench/bench_ingest.py
	$(BIN)/python bench/bench_flaky.py
	$(BIN)/python bench/bench_log_classifier.py
	$(BIN)/python bench/bench_hud.py
	$(BIN)/python bench/bench_freshness.py

bench-logs: install  # the log classifier's part of `make bench` alone
	$(BIN)/python bench/bench_log_classifier.py

# Refresh the README's HUD screenshots (docs/) from the browser test's simulated archive.
screenshots: install
	TORCHCI_SCREENSHOTS=$(CURDIR)/docs $(BIN)/python -m pytest -q tests/test_hud_browser.py

bench-shards: install
	$(BIN)/python bench/bench_shards.py

bench-memory: install
	$(BIN)/python bench/bench_memory.py

bench-callbacks: install  # a day of downstream CI callbacks: memory under DuckDB limits, CPU of a realistic day
	$(BIN)/python bench/bench_callbacks.py

bench-serve: install
	$(BIN)/python bench/bench_serve.py

bench-relay-latency: install
	$(BIN)/python bench/bench_relay_latency.py
	$(BIN)/python bench/bench_relay_prs.py

bench-freshness: install  # the intra-day refresh's part of `make bench` alone
	$(BIN)/python bench/bench_freshness.py

bench-increment: install  # the refresh's ingest: a 5-minute increment against re-ingesting the day
	$(BIN)/python bench/bench_increment.py

bench-extracts: install  # naming a window's per-file extracts, local disk and a local S3 server
	$(BIN)/python bench/bench_extracts.py

bench-s3-refresh: install  # a small day's refresh on a local S3 server against the local disk: S3 requests by operation and step
	$(BIN)/python bench/bench_s3_refresh.py

bench-drci: install  # Dr. CI's GitHub requests and freshness on a PyTorch-sized day of pull requests
	$(BIN)/python bench/bench_drci.py

bench-backfill: install  # torchci backfill against the fake GitHub API serving a simulated PyTorch-sized day
	$(BIN)/python bench/bench_backfill.py

bench-gap-repair: install  # gap repair's GitHub requests and repair delays over a PyTorch-sized day of running jobs
	$(BIN)/python bench/bench_gap_repair.py

bench-search: install  # the search requests of reading every open DISABLED issue, past GitHub's 1,000 results
	$(BIN)/python bench/bench_search.py

bench-ui-run: install  # a day launched from the Dagster UI against the same day from `torchci run`
	$(BIN)/python bench/bench_ui_run.py

eval: install
	$(BIN)/python bench/eval_flaky.py
	$(BIN)/python bench/eval_drci.py
	$(BIN)/python bench/eval_guardians.py
	$(BIN)/python bench/eval_lifecycle.py

eval-lifecycle: install  # the disabled tests' lifecycle part of `make eval` alone
	$(BIN)/python bench/eval_lifecycle.py

eval-guardians: install  # the trunk guardians' part of `make eval` alone
	$(BIN)/python bench/eval_guardians.py

docs-tables: install  # docs/tables.md, from torchci_assets/lake_columns/*.yaml and the types of the lake `make run` filled
	$(BIN)/python -m torchci_assets.docs_tables

clean:
	rm -rf var
