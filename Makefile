# Two entry points matter: `make demo` (the pipeline end to end) and `make test` (everything CI checks).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install lint typecheck docs docs-check test test-fast test-faults soak bench demo demo-kube clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy schemas portraits policies evaluation streams bench

# The reference pages (settings, commands, plugins) regenerated from the code, then the site, strictly: a broken
# link or a page left out of mkdocs.yml's nav fails the build.
docs: install
	$(BIN)/python -m docs.reference
	$(BIN)/mkdocs build --strict --quiet -d build/site

# What CI runs: the committed reference pages must already match the code (`make docs` rewrites them).
docs-check: install
	$(BIN)/python -m docs.reference --check
	$(BIN)/mkdocs build --strict --quiet -d build/site

# The whole suite, Kafka and Kubernetes tests included: tests/conftest.py starts one broker and one control
# plane for the session (KAFKA_BOOTSTRAP_SERVERS / KUBECONFIG name existing ones); the first run on a machine
# also builds the control plane with Go into ~/.cache/eyrie (`eyrie kube up` does the same).
test: lint typecheck docs-check
	$(BIN)/pytest

# Everything that needs neither a broker nor a Kubernetes API server.
test-fast: install
	$(BIN)/pytest -m 'not kafka and not kube'

# The fault cases alone (CI runs them within `make test`): a 20,000-pod replay per fault, and the table.
test-faults: install
	$(BIN)/pytest tests/faults

# One million samples and 100,000 pods through one worker: RSS and throughput by round, soak.png.
soak: install
	$(BIN)/python -m bench.soak

bench: install
	$(BIN)/python -m bench.codec
	$(BIN)/python -m bench.placement --nodes 5000 --pods 5000 --profile default
	$(BIN)/python -m bench.ingest
	$(BIN)/python -m bench.tbesk
	$(BIN)/python -m bench.clusters
	for profile in trimaran portrait balanced; do $(BIN)/python -m bench.placement --nodes 5000 --pods 5000 --profile $$profile || exit 1; done

# A broker (KAFKA_BOOTSTRAP_SERVERS, else a local one), a worker, an applier, a replayed workload (a seeded
# one shaped like the Alibaba GPU 2023 trace, or TRACE=DIR_OR_LOG; flat out, or RATE=N events/s), a summary
# table and plots in demo-out/.
TRACE ?=
RATE ?=
demo: install
	$(BIN)/python -m streams.demo $(if $(TRACE),--trace $(TRACE),) $(if $(RATE),--rate $(RATE),)

# eyrie as a Kubernetes scheduler: an API server (KUBECONFIG's, a running `eyrie kube up`, else a throwaway
# local control plane), a broker (as for `make demo`), a worker, an applier binding through the API server and
# the bridge; kubectl creates 50 seeded nodes and 300 pods with schedulerName eyrie; waits until every pod is
# bound or explained, then prints pods per node, pending pods and why, and the summary table.
demo-kube: install
	$(BIN)/python -m streams.demo.kube

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
