# sglpatch: carry the DSA/MTP patch series on top of a pinned sglang.
# Set-up is two commands: `make apply` then `make test`. `make help` lists the rest.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SGLPATCH := $(VENV)/bin/sglpatch$(if $(V), -v,)

SGLANG   ?=
ONTO     ?=
BRANCH   ?=
FROM     ?=
BASE     ?= v0.5.14
TARGET_ARG := $(if $(SGLANG),--sglang $(SGLANG),)
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help apply revert status rebase drift pr check-patches test test-toolkit test-patched test-gpu bench lint ci-gpu gpu-bundle dsa-kit rerun export clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 16

$(VENV)/.tool-stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

$(VENV)/.sglang-cpu-stamp: $(VENV)/.tool-stamp ci/requirements-sglang-cpu.txt
	$(PY) -m pip install -q -r ci/requirements-sglang-cpu.txt
	touch $@

apply: $(VENV)/.tool-stamp ## apply the series (SGLANG=PATH: a checkout or installed package; default: pinned base in build/sglang)
	$(SGLPATCH) apply $(TARGET_ARG) $(if $(THREEWAY),--3way,) $(if $(BRANCH),--branch $(BRANCH),)

revert: $(VENV)/.tool-stamp ## take the series back out of SGLANG=PATH (every byte restored)
	$(SGLPATCH) revert $(TARGET_ARG)

status: $(VENV)/.tool-stamp ## per patch: applied / applies cleanly / conflicts, and whether SGLANG=PATH is at the pin
	$(SGLPATCH) status $(TARGET_ARG)

rebase: $(VENV)/.tool-stamp ## ONTO=REF (tag, commit or release like 0.5.15): replay the series there; CONTINUE=1 / ABORT=1 after a conflict; DROP_UPSTREAMED=1; CHECK_IMPORTS=1
	$(SGLPATCH) rebase $(TARGET_ARG) $(if $(CONTINUE),--continue,$(if $(ABORT),--abort,--onto $(ONTO))) $(if $(DROP_UPSTREAMED),--drop-upstreamed,) $(if $(CHECK_IMPORTS),--check-imports,)

drift: $(VENV)/.tool-stamp ## patch x release table (markdown + png in docs/drift); RELEASES=a,b,c (default: every release since the pin)
	$(SGLPATCH) drift $(if $(RELEASES),--releases $(RELEASES),)

pr: $(VENV)/.tool-stamp ## upstream PRs per group: branches, lint, bodies in build/pr, gh commands; FORK=remote-or-url, SUBMIT=1 to push and open
	$(SGLPATCH) pr $(TARGET_ARG) $(if $(ONTO),--onto $(ONTO),) $(if $(FORK),--fork $(FORK),) $(if $(SUBMIT),--submit,) $(if $(OUT),--out $(OUT),)

.PHONY: recover test-fault
recover: $(VENV)/.tool-stamp ## after an interrupted apply/revert/rebase of SGLANG=PATH: finish or undo it, and say which state it is in
	$(SGLPATCH) recover $(TARGET_ARG)

test-fault: $(VENV)/.tool-stamp ## full fault grid: apply/revert/rebase cut at every write point x SIGINT/TERM/KILL x checkout/package
	SGLPATCH_FAULT_GRID=full $(PY) -m pytest -n 2 --dist load -ra $(PYTEST_ARGS) tests/reliability

test: $(VENV)/.sglang-cpu-stamp ## run the CPU test suite (toolkit on real sglang trees, patched sglang modules)
	$(SGLPATCH) apply
	$(PY) -m pytest -n 2 --dist loadfile -ra $(PYTEST_ARGS) --ignore=tests/gpu tests

check-patches: $(VENV)/.sglang-cpu-stamp ## per patch: its CPU tests fail without it; every prefix passes the tests of its patches
	$(SGLPATCH) check

test-gpu: $(VENV)/.tool-stamp ## GPU tests of the patches: sglang's own indexer path and seeded draft loop, DeepGEMM (on a CUDA machine; they skip elsewhere with the reason)
	$(PY) -m pytest -ra tests/gpu

ci-gpu: $(VENV)/.tool-stamp ## GPU CI leg: apply to SGLANG=PATH, run upstream test_dsa.py, the DSA kit, tests/gpu; junit + JSON summary at OUT=STEM; LEG=h100|b200 (default: from the GPU), GPU_PYTHON=python with torch
	$(SGLPATCH) gpu-leg $(TARGET_ARG) $(if $(LEG),--leg $(LEG),) $(if $(OUT),--out $(OUT),) $(if $(GPU_PYTHON),--python $(GPU_PYTHON),)

gpu-bundle: ## offline bundle for an air-gapped GPU box in .gpu-bundle/ (sglang's pins, trimmed sgl_kernel, DeepGEMM; sha256-locked)
	$(PYTHON) ci/gpu_bundle.py --out .gpu-bundle

dsa-kit: ## on the GPU box: sglang's own DSA kit from .gpu-bundle, pristine then patched; junit + JSON to OUT=DIR
	bash ci/run_dsa_kit.sh --patches none --label pristine $(if $(OUT),--out $(OUT),)
	bash ci/run_dsa_kit.sh --patches patches/series --label patched $(if $(OUT),--out $(OUT),)

rerun: $(VENV)/.tool-stamp ## per PR group: the /rerun-test (and /tag-run-ci-label) comment lines for the upstream tests it affects, and the local commands
	$(SGLPATCH) rerun $(if $(SGLANG),--sglang $(SGLANG),)

bench: $(VENV)/.tool-stamp ## print timings: apply on the pinned base vs plain git am; on a GPU the paged-MQA kernel layouts and the whole indexer step (sglang's code)
	$(PY) bench/apply_time.py
	@if $(PY) -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then \
		$(PY) bench/paged_mqa.py && $(PY) bench/indexer_step.py --grid full; else echo "bench/paged_mqa.py, bench/indexer_step.py: no CUDA GPU here; committed H200 results: docs/results/paged_mqa_h200.json, docs/results/indexer_h200.json"; fi

lint: $(VENV)/.tool-stamp ## ruff and black on the toolkit and tests; actionlint on ci/workflows/gpu-matrix.yml
	$(PY) -m ruff check scripts tests testing bench
	$(PY) -m black --check -q scripts tests testing bench
	$(PY) -m ruff check ci
	$(PY) -m black --check -q ci
	$(VENV)/bin/actionlint ci/workflows/gpu-matrix.yml

export: $(VENV)/.tool-stamp ## rewrite patches/ from commits BASE..HEAD in FROM=REPO (regenerates series, SHA256SUMS, pin)
	$(SGLPATCH) export --from $(FROM) --base $(BASE)

clean: ## remove the applied default base (build/); the wheel cache stays
	rm -rf build
