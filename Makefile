# The two commands a new user runs: `make demo` and `make test`.
# Everything the tests need is installed here into .venv (system packages: .ci/run).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PACKAGES := $(sort $(dir $(wildcard packages/*/pyproject.toml)))
STAMP := $(VENV)/.installed

.PHONY: all install lint typecheck imports unit test demo bench proto clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python requirements-dev.txt $(wildcard packages/*/pyproject.toml)
	$(BIN)/pip install --quiet -r requirements-dev.txt $(foreach p,$(PACKAGES),-e $(p))
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy $(foreach p,$(PACKAGES),$(p)src)

imports: install
	$(BIN)/lint-imports

unit: install
	$(BIN)/pytest -q

test: lint typecheck imports unit

demo: install
	$(BIN)/vnpu plan --cluster examples/cluster.yaml --workload examples/workload.yaml

bench: install
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# The script pins its generator versions and installs them in its own virtualenv.
proto:
	bash scripts/gen_proto.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
