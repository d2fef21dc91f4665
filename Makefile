# The two commands a new user runs: `make demo` and `make test`.
# `make demo` installs the packages alone into .venv; `make test` adds the test and lint
# tools on top (requirements-test.txt, requirements-lint.txt; system packages: .ci/run).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PACKAGES := $(sort $(dir $(wildcard packages/*/pyproject.toml)))
RUNTIME_STAMP := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed
CHART_STAMP := $(VENV)/.installed-chart

.PHONY: all runtime install lint typecheck imports unit test demo demo-dra demo-volcano demo-hami bench proto dist chart k8s-bin kwok-bin kueue-bin peers-bin peer-charts clean

all: test

# uv installs into the venv in seconds what pip takes a minute for (it resolves the sibling
# packages from the workspace: [tool.uv.sources] in pyproject.toml).
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: $(BIN)/python
	$(BIN)/pip install --quiet uv

INSTALL := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python

# Every package, editable, and what their pyprojects need to run: nothing else.
$(RUNTIME_STAMP): $(BIN)/uv $(wildcard packages/*/pyproject.toml)
	$(INSTALL) $(foreach p,$(PACKAGES),-e $(p))
	touch $(RUNTIME_STAMP)

# The test and lint tools on top of the packages.
$(STAMP): $(RUNTIME_STAMP) requirements-dev.txt requirements-test.txt requirements-lint.txt requirements-chart.txt
	$(INSTALL) -r requirements-dev.txt
	touch $(STAMP)

runtime: $(RUNTIME_STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy $(foreach p,$(PACKAGES),$(p)src)

imports: install
	$(BIN)/lint-imports

# The tests run against the real kube-apiserver (one per session, a namespace per test) and
# the sandbox's real control plane: both are built on first use (k8s-bin).
unit: install k8s-bin
	$(BIN)/pytest -q

test: lint typecheck imports unit

# A fresh sandbox in .sandbox/ on the example cluster (the one a previous demo left running is
# stopped first), then the scenario; the sandbox keeps running (docs/sandbox.md). vnpu's
# services run with the chart's RBAC and under its admission policies (the chart rendered
# with its defaults, as `make chart` does).
DEMO_DIR := .sandbox
DEMO_CHART := $(VENV)/demo-chart.yaml
demo: $(RUNTIME_STAMP) $(CHART_STAMP) k8s-bin
	$(BIN)/python scripts/render_chart.py --output $(DEMO_CHART)
	$(BIN)/vnpu-sandbox down --dir $(DEMO_DIR)
	$(BIN)/vnpu-sandbox up --cluster examples/cluster.yaml --dir $(DEMO_DIR) --rbac $(DEMO_CHART)
	$(BIN)/vnpu-sandbox demo --dir $(DEMO_DIR) --manifests examples/demo

# The same in DRA mode (docs/dra.md): kube-scheduler allocates the npu.vnpu.io driver's devices,
# vnpu's services run with the chart's RBAC for `global.mode=dra`, and the scenario is
# examples/demo-dra (no soft slices). It replaces the sandbox `make demo` left in .sandbox/.
DEMO_DRA_VALUES := $(VENV)/demo-dra-values.yaml
DEMO_DRA_CHART := $(VENV)/demo-dra-chart.yaml
demo-dra: $(RUNTIME_STAMP) $(CHART_STAMP) k8s-bin
	printf 'global:\n  mode: dra\n' > $(DEMO_DRA_VALUES)
	$(BIN)/python scripts/render_chart.py --values $(DEMO_DRA_VALUES) --output $(DEMO_DRA_CHART)
	$(BIN)/vnpu-sandbox down --dir $(DEMO_DIR)
	$(BIN)/vnpu-sandbox up --cluster examples/cluster.yaml --dir $(DEMO_DIR) --rbac $(DEMO_DRA_CHART) --mode dra
	$(BIN)/vnpu-sandbox demo --dir $(DEMO_DIR) --mode dra --manifests examples/demo-dra

# vnpu's device plugin and exporter under Volcano's own scheduler (the operator guide's
# Topology 2) or HAMi's (Topology 3), with both charts' RBAC and the peer's configuration from
# deploy/peers/<peer>-values.yaml (docs/sandbox.md, "Under a peer's scheduler"). It replaces
# the sandbox `make demo` left in .sandbox/; try it with examples/volcano/seed.yaml (Volcano)
# or examples/hami/seed.yaml (HAMi).
demo-volcano demo-hami: demo-%: $(RUNTIME_STAMP) peer-charts k8s-bin
	$(BIN)/vnpu-sandbox down --dir $(DEMO_DIR)
	$(BIN)/vnpu-sandbox up --cluster examples/cluster.yaml --dir $(DEMO_DIR) --scheduler $* \
		--peer-chart $(PEER_CHARTS)/$*.yaml --rbac $(PEER_CHARTS)/vnpu-$*.yaml

bench: install
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# One wheel per package in dist/; `pip install --find-links dist vnpu-exporter` then takes the
# vnpu packages from there and the rest from PyPI. pip builds each in its own build env.
dist: $(BIN)/python
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist $(PACKAGES)

# One container image per service (vnpu-scheduler, vnpu-device-plugin, vnpu-exporter,
# vnpu-dra-driver) as OCI
# archives in dist/images/, built from the wheels above with buildah and mmdebstrap, no Docker
# daemon (root; the first build makes a Debian base in ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/images/).
# `make push REGISTRY=host[:port]/path` copies them to REGISTRY/<service>:<version> with skopeo
# (docs/operator-guide.md, "Images").
.PHONY: images push
images: dist $(RUNTIME_STAMP)
	PYTHON=$(BIN)/python bash scripts/images.sh build

push:
	@if [ -z "$(REGISTRY)" ]; then echo "make push: set REGISTRY, e.g. make push REGISTRY=registry.example/vnpu" >&2; exit 2; fi
	bash scripts/images.sh push "$(REGISTRY)"

# helm-python-sdk alone, for `make chart` (quiet on stdout, which may be the chart).
$(CHART_STAMP): $(BIN)/uv requirements-chart.txt
	@$(INSTALL) -r requirements-chart.txt >&2
	@touch $(CHART_STAMP)

# deploy/helm/vnpu rendered to YAML as `helm template vnpu -n kube-system` renders it, without
# a helm binary: `make chart [VALUES="a.yaml b.yaml"] [OUT=vnpu.yaml]` (stdout without OUT).
chart: $(CHART_STAMP)
	@$(BIN)/python scripts/render_chart.py $(foreach v,$(VALUES),--values $(v)) $(if $(OUT),--output $(OUT))

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, pinned, built with
# `go` into ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/k8s/<version>/ once per machine (about 12
# minutes on two cores; the script prints its progress and the time it took), then found there
# in no time (docs/real-control-plane.md).
k8s-bin:
	bash scripts/k8s-bin.sh

# KWOK (sigs.k8s.io/kwok, pinned), built with `go` into
# ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/kwok/<version>/ (once per machine), for
# benchmarks/bench_scale.py's fake nodes (docs/benchmarks.md).
kwok-bin:
	bash scripts/kwok-bin.sh

# Kueue's manager (sigs.k8s.io/kueue, pinned), built with `go` into
# ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/kueue/<version>/ once per machine (about 5 minutes on
# two cores), for `vnpu-sandbox up --kueue` and tests/e2e/test_kueue.py (docs/sandbox.md).
kueue-bin:
	bash scripts/kueue-bin.sh

# Volcano's vc-scheduler and vc-controller-manager and HAMi's hami-scheduler, built with `go
# build` from source archives pinned by sha256 (../shared/peers beside the checkout, or
# VNPU_PEERS_ARCHIVES, or a checkout of the same commit: scripts/peers-bin.sh) into
# ${XDG_CACHE_HOME:-$HOME/.cache}/vnpu/peers/<peer>/<commit>/ once per machine (about 4.5 and
# 2 minutes on two cores), for `vnpu-sandbox up --scheduler` and tests/e2e/test_{volcano,hami}.py.
peers-bin:
	bash scripts/peers-bin.sh

# Each peer's own chart rendered with vnpu's values for it (deploy/peers/), and vnpu's chart
# with its values for that peer, into .venv/peer-charts/: what `vnpu-sandbox up --scheduler`
# takes (--peer-chart, --rbac).
PEER_CHARTS := $(VENV)/peer-charts
peer-charts: $(RUNTIME_STAMP) $(CHART_STAMP) peers-bin
	@mkdir -p $(PEER_CHARTS)
	$(BIN)/python scripts/render_chart.py --peer volcano --output $(PEER_CHARTS)/volcano.yaml
	$(BIN)/python scripts/render_chart.py --values deploy/helm/vnpu/values-volcano.yaml \
		--output $(PEER_CHARTS)/vnpu-volcano.yaml
	$(BIN)/python scripts/render_chart.py --peer hami --output $(PEER_CHARTS)/hami.yaml
	$(BIN)/python scripts/render_chart.py --values deploy/helm/vnpu/values-hami.yaml \
		--output $(PEER_CHARTS)/vnpu-hami.yaml

# The script pins its generator versions and installs them in its own virtualenv.
proto:
	bash scripts/gen_proto.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache dist
