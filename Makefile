# sglpatch: carry the DSA/MTP patch series on top of a pinned sglang.
# Set-up is two commands: `make apply` then `make test`. `make help` lists the rest.

# Every value a user gives (SGLANG=PATH on the command line, or from the environment) is taken as written: each
# becomes a simple variable holding its raw text, so a `$(...)` in it is text that make never runs, and it reaches
# sglpatch as one single-quoted argument (`q` below).
USER_VARIABLES := PYTHON SGLANG LINE ONTO BRANCH FROM BASE JOBS TORCH_INDEX PYTEST_ARGS PYTEST_TMP KEEP_TREES THREEWAY \
	CONTINUE ABORT DROP DROP_UPSTREAMED CHECK_IMPORTS RELEASES DOCS FORK FORK_OWNER SUBMIT OUT LEG GPU_PYTHON V NEXT_N GRID SEED \
	SGLANG_TESTS
# a PYTEST_TMP the user names may be a folder of theirs, which pytest's --basetemp empties: checked before a run
PYTEST_TMP_GIVEN := $(filter command line environment%,$(origin PYTEST_TMP))
$(foreach v,$(USER_VARIABLES),$(if $(filter command line environment%,$(origin $(v))),$(eval override $(v) := $$(value $(v)))))

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# SGLPATCH_FROM_MAKE: the hints sglpatch prints name make's variables (THREEWAY=1), not its flags (scripts/sglpatch/hints.py)
SGLPATCH := SGLPATCH_FROM_MAKE=1 $(VENV)/bin/sglpatch$(if $(V), -v,)

SGLANG   ?=
LINE     ?=
ONTO     ?=
BRANCH   ?=
FROM     ?=
BASE     ?= v0.5.14
JOBS     ?=
TORCH_INDEX ?=
PYTEST_ARGS ?=
# Every value a user gives goes to the shell single-quoted, so paths with spaces (or $, ;) stay one argument.
q = '$(subst ','\'',$(1))'
# pytest's own temp folder, one per checkout: the shared /tmp/pytest-of-USER keeps only the 3 newest runs, so
# concurrent runs from other checkouts deleted each other's trees mid-test. On a RAM disk (/dev/shm) when it
# has the room, a passed test's trees deleted as it ends; else on the disk (testing/tmp_root.py says why).
# SGLPATCH_TEST_TMP=disk keeps them on the disk.
TEST_TMP_KIND := $(shell $(call q,$(PYTHON)) testing/tmp_root.py 2>/dev/null || echo disk)
TEST_TMP_ROOT = $(if $(filter ram,$(TEST_TMP_KIND)),/dev/shm,$(or $(TMPDIR),/tmp))
PYTEST_TMP ?= $(TEST_TMP_ROOT)/sglpatch-pytest-$(shell id -u)-$(notdir $(CURDIR))
PYTEST_KEEP = $(if $(filter ram,$(TEST_TMP_KIND)),-o tmp_path_retention_policy=failed,)
PYTEST = $(PY) -m pytest --basetemp=$(call q,$(PYTEST_TMP)) $(PYTEST_KEEP)
# A pytest run's trees ($$trees; $$status its exit) on the RAM disk hold memory: they are freed when it ends,
# passed, failed or interrupted (FREEING sets a trap before the run). KEEP_TREES=1 keeps those of a failed run
# for a look, and make says where (the next make test frees them). No apostrophe here: the trap quotes it.
FREE_RAM_TREES = if [ "$(TEST_TMP_KIND)" = ram ]; then \
	if [ $$status = 0 ] || [ -z "$(if $(KEEP_TREES),keep)" ]; then rm -rf "$$trees"; \
	[ $$status = 0 ] || echo "make: the trees of the failed run are freed from the RAM disk ($$trees); KEEP_TREES=1 keeps them" >&2; \
	else echo "make: the trees of the failed run stay in $$trees, in memory (a RAM disk): rm -rf them, or the next make test does" >&2; fi; fi
FREEING = trees=$(1); trap 'status=130; $(FREE_RAM_TREES); exit 130' INT TERM;
# ... and exit with the run's status: what follows a main pytest command in a recipe
FREE_RAM_TREES_AND_EXIT = status=$$?; $(FREE_RAM_TREES); exit $$status
# The last run's trees (several GB) are moved aside and deleted in the background, not before the first test.
# A PYTEST_TMP given on the command line that holds files and no mark of a test run (tests/conftest.py writes
# .sglpatch-pytest in it) is a folder of the user's: refused, nothing deleted. So is each PYTEST_TMP-<line> (and
# PYTEST_TMP-python) that a run hands pytest as --basetemp for a line's own tests: a folder of the user's of
# that name (PYTEST_TMP=/data/sglang beside /data/sglang-v0.5.23) was emptied with no look.
REFUSE_USERS_TMP = if [ -d $(1) ] && [ -n "$$(ls -A $(1))" ] && [ ! -e $(1)/.sglpatch-pytest ]; then \
	echo "make: "$(1)" holds files no test run made, and a run with PYTEST_TMP="$(call q,$(PYTEST_TMP))" empties it; nothing was deleted: name a new folder" >&2; \
	exit 2; fi
CHECK_PYTEST_TMP = @if [ -n "$(PYTEST_TMP_GIVEN)" ]; then $(call REFUSE_USERS_TMP,$(call q,$(PYTEST_TMP))); \
	lines=$$($(SGLPATCH) lines --test-folders) || exit 2; echo "$$lines" | while read -r line folder; do \
	[ -z "$$line" ] || { $(call REFUSE_USERS_TMP,$(call q,$(PYTEST_TMP))-"$$line"); } || exit 2; done || exit 2; fi
SET_TMP_ASIDE = @if [ -d $(call q,$(PYTEST_TMP)) ]; then old=$(call q,$(PYTEST_TMP)).old.$$$$; \
	mv $(call q,$(PYTEST_TMP)) "$$old" && (rm -rf "$$old" >/dev/null 2>&1 &); fi
# A relative path is the caller's: `make -C PROJECT apply SGLANG=build/sglang` from another folder means that
# folder's build/sglang. make -C (and a make another make runs) prints directories, so MAKEFLAGS holds `w`, and
# $(PWD) is the folder of the shell that started it; otherwise make runs where it was started, $(CURDIR).
CALLER_DIR := $(if $(and $(findstring w,$(filter-out -%,$(firstword $(MAKEFLAGS)))),$(PWD)),$(PWD),$(CURDIR))
caller_path = $(if $(and $(filter-out $(CURDIR),$(CALLER_DIR)),$(filter-out /% ~%,$(firstword $(1)))),$(CALLER_DIR)/$(1),$(1))
# --option=VALUE: a value that starts with `-` (SGLANG=-x) is the option's, not another option
SGLANG_ARG = $(if $(SGLANG),--sglang=$(call q,$(call caller_path,$(SGLANG))),)
TARGET_ARG = $(SGLANG_ARG) $(LINE_ARG)
# LINE=v0.5.23 picks a series line (patches/<line>/); default: the one matching SGLANG's version, or the default line
LINE_ARG = $(if $(LINE),--line=$(call q,$(LINE)),)

# A .venv made by a Python older than 3.11 (say a first `make apply PYTHON=python3.10`) can never work,
# and its stamp would keep it: it is removed here, so the next target rebuilds it with $(PYTHON).
ifneq ($(wildcard $(VENV)/pyvenv.cfg),)
ifneq ($(shell $(PY) -c 'import sys; print(sys.version_info >= (3, 11))' 2>/dev/null),True)
$(info make: $(VENV) was made with a Python older than 3.11 (or its Python is gone): removing it; it is rebuilt with $(PYTHON))
$(shell rm -rf $(VENV))
endif
endif

.DEFAULT_GOAL := help
.PHONY: bench-engine bench-tpot engine-report
.PHONY: help apply revert lines status rebase drift pr check-patches test test-offline test-gpu bench lint ci-gpu gpu-bundle dsa-kit rerun export clean distclean

# LC_ALL=C: in some locales (tr_TR) [a-z] leaves out i, and every target with an i in its name
help: ## list the targets
	@LC_ALL=C grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | LC_ALL=C sed -E 's/:.*## /\t/' | expand -t 16

$(VENV)/.tool-stamp: pyproject.toml
	@$(call q,$(PYTHON)) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "make: $(PYTHON) is not Python 3.11 or newer (sglpatch needs 3.11+): run again with PYTHON=python3.11 (or newer); nothing was made" >&2; exit 2; }
	@echo "make: creating $(VENV) with $(PYTHON) and installing sglpatch and its test tools (pip: about 40 s the first time)"
	$(call q,$(PYTHON)) -m venv $(VENV)
	$(PY) -m pip install --progress-bar off --upgrade pip
	$(PY) -m pip install --progress-bar off -e '.[test]'
	touch $@

$(VENV)/.sglang-cpu-stamp: $(VENV)/.tool-stamp ci/requirements-sglang-cpu.txt
	@echo "make: installing sglang 0.5.14's import-time dependencies for the CPU tests (ci/requirements-sglang-cpu.txt)"
	@echo "make: from PyPI alone torch is the CUDA build: about 2.7 GB of wheels, several minutes; TORCH_INDEX=URL takes a CPU build (README)"
	$(if $(TORCH_INDEX),$(PY) -m pip install --progress-bar off --index-url $(call q,$(TORCH_INDEX)) "$$(grep '^torch==' ci/requirements-sglang-cpu.txt)")
	$(PY) -m pip install --progress-bar off -r ci/requirements-sglang-cpu.txt
	touch $@

apply: $(VENV)/.tool-stamp ## apply the line matching SGLANG=PATH (a checkout or installed package; LINE= overrides); default: the pinned base in build/sglang, or LINE's in build/sglang-<line>
	$(SGLPATCH) apply $(TARGET_ARG) $(if $(THREEWAY),--3way,) $(if $(BRANCH),--branch=$(call q,$(BRANCH)),)

revert: $(VENV)/.tool-stamp ## take the series back out of SGLANG=PATH (every byte restored)
	$(SGLPATCH) revert $(TARGET_ARG)

lines: $(VENV)/.tool-stamp ## list the series lines (patches/<tag>/): patches, default base, CPU tests folder, patches upstream
	$(SGLPATCH) lines

status: $(VENV)/.tool-stamp ## names the line; per patch: applied / applies cleanly / conflicts, and whether SGLANG=PATH is at the pin
	$(SGLPATCH) status $(TARGET_ARG)

rebase: $(VENV)/.tool-stamp ## ONTO=REF (tag, commit or release like 0.5.15): replay the series there; CONTINUE=1 / ABORT=1 / DROP=N (leave patch N out) after a conflict; DROP_UPSTREAMED=1; CHECK_IMPORTS=1
	$(SGLPATCH) rebase $(TARGET_ARG) $(if $(CONTINUE),--continue,$(if $(ABORT),--abort,$(if $(ONTO),--onto=$(call q,$(ONTO)),))) $(if $(DROP),--drop=$(call q,$(DROP)),) $(if $(DROP_UPSTREAMED),--drop-upstreamed,) $(if $(CHECK_IMPORTS),--check-imports,)

drift: $(VENV)/.tool-stamp ## per line: patch x release table from its base on (markdown + png in build/drift/<line>; DOCS=1: update docs/drift and each later line's upstream.json; LINE= one line); RELEASES=a,b,c (default: every release since the pin)
	$(SGLPATCH) drift $(LINE_ARG) $(if $(RELEASES),--releases=$(call q,$(RELEASES)),) $(if $(DOCS),--out docs/drift --upstream-json,)

pr: $(VENV)/.tool-stamp ## upstream PRs per group: branches on SGLANG=<your sglang clone> (its main; ONTO=REF), lint, bodies in build/pr, gh commands; FORK=remote-or-url (FORK_OWNER=), SUBMIT=1 to push and open or update
	$(SGLPATCH) pr $(TARGET_ARG) $(if $(ONTO),--onto=$(call q,$(ONTO)),) $(if $(FORK),--fork=$(call q,$(FORK)),) $(if $(FORK_OWNER),--fork-owner=$(call q,$(FORK_OWNER)),) $(if $(SUBMIT),--submit,) $(if $(OUT),--out=$(call q,$(call caller_path,$(OUT))),)

.PHONY: recover test-fault
recover: $(VENV)/.tool-stamp ## after an interrupted apply/revert/rebase of SGLANG=PATH: finish or undo it, and say which state it is in
	$(SGLPATCH) recover $(TARGET_ARG)

test-fault: $(VENV)/.tool-stamp ## full fault grid: apply/revert/rebase cut at every write point x SIGINT/TERM/KILL x checkout/package, and killed inside git; with the hostile trials' cases (rounds 4 on), which make test leaves out
	$(CHECK_PYTEST_TMP)
	$(SET_TMP_ASIDE)
	$(call FREEING,$(call q,$(PYTEST_TMP))) SGLPATCH_FAULT_GRID=full $(PYTEST) -n 2 --dist load -ra $(PYTEST_ARGS) tests/reliability; $(FREE_RAM_TREES_AND_EXIT)

# Each line but the default one has its CPU tests in tests/patched_<line>/, run in a pytest process of its own
# (two sglang versions cannot share one): `sglpatch lines --test-folders` prints "<line> <folder>" for each.
APPLY_LINES = lines=$$($(SGLPATCH) lines --test-folders) || exit 2; \
	echo "$$lines" | while read -r line folder; do [ -z "$$line" ] || $(SGLPATCH) apply --line "$$line" || exit 2; done
TEST_LINES = lines=$$($(SGLPATCH) lines --test-folders) || exit 2; \
	echo "$$lines" | while read -r line folder; do [ -z "$$line" ] && continue; \
	echo "make: line $$line: $$folder in a pytest process of its own"; \
	$(call FREEING,$(call q,$(PYTEST_TMP))-"$$line") $(PY) -m pytest --basetemp="$$trees" $(PYTEST_KEEP) $(1) "$$folder"; \
	status=$$?; $(FREE_RAM_TREES); [ $$status = 0 ] || exit 1; done

test: $(VENV)/.sglang-cpu-stamp ## run the CPU test suite (toolkit on real sglang trees, patched sglang modules; each line's own tests in its own process)
	$(CHECK_PYTEST_TMP)
	$(SGLPATCH) apply --line $(DEFAULT_LINE)
	@$(APPLY_LINES)
	@echo "make: running the CPU suite on 2 workers, its trees under "$(call q,$(PYTEST_TMP))" (README: how long it takes; make test-offline leaves out the tests that need PyPI)"
	$(SET_TMP_ASIDE)
	$(call FREEING,$(call q,$(PYTEST_TMP))) $(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder -ra -m 'not series_proof and not fault_grid and not hostile_rounds' $(PYTEST_ARGS) --ignore=tests/gpu --ignore-glob='tests/patched_v*' tests; $(FREE_RAM_TREES_AND_EXIT)
	@$(call TEST_LINES,-n 2 --dist loadfile -ra $(PYTEST_ARGS))

test-offline: $(VENV)/.sglang-cpu-stamp ## the CPU suite without the network: pip indexes off, tests marked `network` left out (needs one online `make apply` first)
	$(CHECK_PYTEST_TMP)
	PIP_NO_INDEX=1 $(SGLPATCH) apply --line $(DEFAULT_LINE)
	@export PIP_NO_INDEX=1; $(APPLY_LINES)
	@echo "make: running the CPU suite without PyPI (pytest -m 'not network')"
	$(SET_TMP_ASIDE)
	$(call FREEING,$(call q,$(PYTEST_TMP))) PIP_NO_INDEX=1 $(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder -ra -m 'not network and not series_proof and not fault_grid and not hostile_rounds' $(PYTEST_ARGS) --ignore=tests/gpu --ignore-glob='tests/patched_v*' tests; $(FREE_RAM_TREES_AND_EXIT)
	@export PIP_NO_INDEX=1; $(call TEST_LINES,-n 2 --dist loadfile -ra -m 'not network' $(PYTEST_ARGS))

# Another Python than the venv's, say Debian 12's own (PYTHON=/usr/bin/python3: 3.11.2, where tarfile's data filter,
# 3.11.4 on, is missing): a venv of its own under build/, and the tests of the code that differs between Python
# patch releases (ci/untar.py unpacking the GPU bundle). .ci/run runs it where /usr/bin/python3 exists.
PYTHON_RELEASE_TESTS := tests/ci/test_gpu_bundle_tools.py
OTHER_VENV = build/venv-$(shell $(call q,$(PYTHON)) -c 'import platform; print(platform.python_version())' 2>/dev/null)
.PHONY: test-python
test-python: ## with PYTHON=/usr/bin/python3 (any 3.11+): the tests of what differs between Python releases, in a venv of its own under build/
	@$(call q,$(PYTHON)) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "make: $(PYTHON) is not Python 3.11 or newer (sglpatch needs 3.11+); nothing was made" >&2; exit 2; }
	@if [ -n "$(PYTEST_TMP_GIVEN)" ]; then $(call REFUSE_USERS_TMP,$(call q,$(PYTEST_TMP))-python); fi
	$(call q,$(PYTHON)) -m venv $(OTHER_VENV)
	$(OTHER_VENV)/bin/python -m pip install --progress-bar off -q -e '.[test]'
	$(call FREEING,$(call q,$(PYTEST_TMP))-python) $(OTHER_VENV)/bin/python -m pytest -p no:cacheprovider -ra \
		--basetemp="$$trees" $(PYTEST_ARGS) $(PYTHON_RELEASE_TESTS); $(FREE_RAM_TREES_AND_EXIT)

check-patches: $(VENV)/.sglang-cpu-stamp ## per patch: its CPU tests fail without it; every prefix passes the tests of its patches (JOBS=N pytest runs at once; default: CPUs, at most 4)
	$(SGLPATCH) check-patches $(LINE_ARG) $(if $(JOBS),--jobs=$(call q,$(JOBS)),)

test-gpu: $(VENV)/.tool-stamp ## GPU tests of the patches: sglang's own indexer path and seeded draft loop, DeepGEMM (on a CUDA machine; they skip elsewhere with the reason)
	$(PY) -m pytest -ra tests/gpu

ci-gpu: $(VENV)/.tool-stamp ## GPU CI leg: apply to SGLANG=PATH, run upstream test_dsa.py, the DSA kit, tests/gpu; junit + JSON summary at OUT=STEM; LEG=h100|b200 (default: from the GPU), GPU_PYTHON=python with torch
	$(SGLPATCH) gpu-leg $(SGLANG_ARG) $(if $(LEG),--leg=$(call q,$(LEG)),) $(if $(OUT),--out=$(call q,$(call caller_path,$(OUT))),) $(if $(GPU_PYTHON),--python=$(call q,$(GPU_PYTHON)),)

gpu-bundle: ## offline bundle for an air-gapped GPU box in .gpu-bundle/ (sglang's pins, trimmed sgl_kernel, DeepGEMM; sha256-locked); with DeepGEMM's source and the newest DeepGEMM line applied (SGLPATCH_DEEP_GEMM_SOURCE=clone or URL; DEEP_GEMM=0 leaves it out)
	$(call q,$(PYTHON)) ci/gpu_bundle.py --out .gpu-bundle
	$(if $(filter 0,$(DEEP_GEMM)),,$(call q,$(PYTHON)) ci/gpu_bundle.py --out .gpu-bundle --deep-gemm)

# The default line (the oldest): the first of patches/v*/ in version order. For the targets that run without the
# venv, and for make test, whose tests/patched/ are the default line's even after a rebase moved build/sglang on
DEFAULT_LINE := $(notdir $(patsubst %/,%,$(firstword $(shell ls -dv patches/v*/ 2>/dev/null))))
DSA_KIT_LINE = $(or $(LINE),$(DEFAULT_LINE))
DSA_KIT_ARGS = --line $(call q,$(DSA_KIT_LINE)) $(if $(OUT),--out $(call q,$(OUT)),)
dsa-kit: ## on the GPU box: sglang's own DSA kit from .gpu-bundle, pristine then patched (LINE= a line; default: the default line); junit + JSON to OUT=DIR
	bash ci/run_dsa_kit.sh --patches none --label $(call q,pristine$(if $(LINE),-$(LINE),)) $(DSA_KIT_ARGS)
	bash ci/run_dsa_kit.sh --patches $(call q,patches/$(DSA_KIT_LINE)/series) --label $(call q,patched$(if $(LINE),-$(LINE),)) $(DSA_KIT_ARGS)

rerun: $(VENV)/.tool-stamp ## per PR group: the /rerun-test (and /tag-run-ci-label) comment lines for the upstream tests it affects, and the local commands
	$(SGLPATCH) rerun $(TARGET_ARG)

bench: $(VENV)/.sglang-cpu-stamp ## print timings: apply vs plain git am; the SM90 layout rule over the H200 grid; on a GPU the paged-MQA kernel layouts and the whole indexer step (sglang's code)
	$(PY) bench/apply_time.py
	$(SGLPATCH) apply
	$(PY) bench/layout_rule.py
	@if $(PY) -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then \
		$(PY) bench/paged_mqa.py && $(PY) bench/indexer_step.py --grid full && $(PY) bench/studies/sm90_single_read.py --config-json docs/results/sm90_single_read_h200_config.json --out build/bench; else echo "bench/paged_mqa.py, bench/indexer_step.py: no CUDA GPU here; committed H200 results: docs/results/paged_mqa_h200.json, docs/results/indexer_h200.json, docs/results/sm90_single_read_h200.json"; fi

NEXT_N ?= 2,3,4,6
GRID   ?= full
bench-engine: ## on a GPU box, from .gpu-bundle: sglang's Engine with MTP, pristine vs patched side by side (bench/engine_ab.py); NEXT_N=2,4 GRID=full|targets LINE= OUT=DIR SEED=N[,N...] (the IndexShare case at each next_n N) SGLANG_TESTS=GLOB (first the series' tests in sglang's tree matching GLOB)
	bash ci/run_engine_gpu.sh $(if $(LINE),--line $(call q,$(LINE)),) --out $(call q,$(or $(OUT),build/engine)) $(if $(SGLANG_TESTS),--sglang-tests $(call q,$(SGLANG_TESTS)),) -- --next-n $(call q,$(NEXT_N)) --grid $(call q,$(GRID)) $(if $(SEED),--seed-case $(call q,$(SEED)),)

bench-tpot: ## on a GPU box: what a server sees, TPOT with accepted drafts beside a two-process A/A (docs/engine-benchmark.md); NEXT_N=4 LINE= OUT=DIR GRID=targets64k|deploy|wide|wide_long|floor64k (each engine's KV pool sized for its grid)
	bash ci/run_engine_gpu.sh $(if $(LINE),--line $(call q,$(LINE)),) --out $(call q,$(or $(OUT),build/engine)) --save-jit-cache -- --next-n $(call q,$(if $(filter override,$(origin NEXT_N)),$(NEXT_N),4)) --grid $(call q,$(if $(filter override,$(origin GRID)),$(GRID),targets64k)) --two-process-aa --pin-cpus --kv-cache fp8_e4m3 --acceptance 4:3,6:4 --reps 6 --new-tokens 96 --engine-arg sleep_on_idle=true

engine-report: $(VENV)/.tool-stamp ## tables and a picture from engine runs: docs/results/engine_h200.{json,md,png} from docs/results/engine_h200_{run,v0_5_23_run,tpot_}*.json , engine_h200_drafts_n[0-9].json, engine_h200_seed_n[0-9].json, engine_h200_floor64k_*.json and engine_h200_v0_5_23_n[0-9]_read_once.json
	$(PY) -m bench.engine.report docs/results/engine_h200_run*.json docs/results/engine_h200_v0_5_23_run*.json docs/results/engine_h200_tpot_*.json docs/results/engine_h200_drafts_n[0-9].json docs/results/engine_h200_seed_n[0-9].json docs/results/engine_h200_floor64k_*.json docs/results/engine_h200_v0_5_23_n[0-9]_read_once.json --json docs/results/engine_h200.json --md docs/results/engine_h200.md --png docs/results/engine_h200.png

lint: $(VENV)/.tool-stamp ## ruff and black on the toolkit and tests; actionlint on ci/workflows/gpu-matrix.yml
	$(PY) -m ruff check scripts tests testing bench
	$(PY) -m black --check -q scripts tests testing bench
	$(PY) -m ruff check ci
	$(PY) -m black --check -q ci
	$(VENV)/bin/actionlint ci/workflows/gpu-matrix.yml

export: $(VENV)/.tool-stamp ## rewrite patches/ from commits BASE..HEAD in FROM=REPO (regenerates series, SHA256SUMS, pin); LINE=v0.5.23 writes that line from its tag
	$(SGLPATCH) export --from=$(call q,$(call caller_path,$(FROM))) $(if $(LINE),$(LINE_ARG),--base=$(call q,$(BASE)))

# clean runs without the venv (a fresh checkout has none, distclean removes it): sglpatch's own modules need only
# Python 3.11 or newer, and the venv's when there is one
BARE_PYTHON = $(if $(wildcard $(PY)),$(PY),$(call q,$(PYTHON)))
clean: ## remove build/ (the default bases, reports, PR bodies); refused, naming it and the move that keeps it, while a checkout there holds work of yours (commits, stashes, edits, untracked files); .venv and the wheel cache stay
	@$(BARE_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "make: $(BARE_PYTHON) is not Python 3.11 or newer (sglpatch needs 3.11+): run again with PYTHON=python3.11 (or newer); nothing was deleted" >&2; exit 2; }
	@SGLPATCH_FROM_MAKE=1 SGLPATCH_PROJECT=$(call q,$(CURDIR)) PYTHONPATH=$(call q,$(CURDIR)/scripts) $(BARE_PYTHON) -m sglpatch clean

distclean: clean ## also remove .venv (rebuilt by the next target); the wheel cache stays
	rm -rf $(VENV)
