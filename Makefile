# The two commands of the README: `make demo` (the main job) and `make test` (every test).
# Both set up what they need (virtualenv, Go-built binaries) into a cache outside the repo.
SHELL := /bin/bash
VENV = $(shell scripts/bootstrap-venv.sh)
PY = $(VENV)/bin/python

.PHONY: demo test lint unit test-slow test-real-node bench tools reference engine image node-tools csi-sanity snapshot-controller docs

tools:
	@scripts/build-go-tools.sh cluster

# rancher/local-path-provisioner, run beside ours by the takeover tests and the benchmark.
reference:
	@scripts/build-go-tools.sh reference

# csi-sanity, the CSI conformance suite the node plugin's tests run (tests/provisioner/csi).
csi-sanity:
	@scripts/build-go-tools.sh csi-sanity

# The common snapshot controller (external-snapshotter) and the snapshot and ReferenceGrant CRDs,
# for the clusters that ask for snapshots (ClusterOptions.snapshots).
snapshot-controller:
	@scripts/build-go-tools.sh snapshot-controller

# What real nodes run beside the control plane: Debian's runc, CNI plugins, registry, skopeo,
# umoci, busybox-static, bubblewrap, btrfs-progs (installed once), kubelet and containerd from Go
# modules.
node-tools: tools
	@scripts/install-node-packages.sh
	@scripts/build-go-tools.sh node
	@scripts/build-node-images.sh >/dev/null

# The Pulumi engine (CLI, Python language host, Kubernetes provider): `pulumi` on PATH, or the
# engine bundle ($$LPS_PULUMI_BUNDLE, default ../shared/engine) unpacked into the cache.
engine:
	@$(PY) -m scripts.pulumi_engine install

# The provisioner's OCI image (layout and oci-archive), from Debian and PyPI packages only, cached
# outside the repository by a hash of its inputs; prints its digest and size.
image:
	@$(PY) -m scripts.build_image

demo: tools node-tools engine image
	@$(PY) -m scripts.demo

lint:
	@echo "lint: ruff, mypy --strict, import contracts"
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/mypy .
	@$(VENV)/bin/lint-imports --config pyproject.toml

test: tools reference node-tools csi-sanity snapshot-controller engine image lint
	@$(PY) -m pytest -m "not slow" --durations=40

# The documentation site, from docs/ into site/ (git-ignored). `make test` builds it with
# --strict too (tests/docs/test_site.py): a broken link or a page missing from the nav fails.
docs:
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

unit:
	@$(PY) -m pytest tests -m "not cluster and not engine and not slow and not image and not csi"

# The tests marked slow (docs/development.md, "Tests"): too long for every CI run.
test-slow: tools node-tools engine image
	@$(PY) -m pytest -m slow

test-real-node: node-tools image
	@$(PY) -m pytest -m realnode

# The full run: burst, lifted and scale, with the scaling table at 1k, 10k and 50k volumes.
BENCH_ARGS ?= --scale-sizes 1000,50000

bench: tools reference
	@$(PY) -m bench $(BENCH_ARGS)
