#!/usr/bin/env bash
# The indexer-level and draft-loop GPU tests on an air-gapped GPU box, from the bundle made by
# ci/gpu_bundle.py.  Run from the repository root (the `run` tool's working directory).
#
#   bash ci/run_indexer_gpu.sh [--grid smoke|full|tiny] [--out DIR] [--patches SRC]
#                              [--bundle DIR] [--work DIR] [--save-jit-cache] [-- PYTEST ARGS]
#
# Builds two sglang trees from the bundle's pristine v0.5.14 package folder: WORK/trees/pristine
# (as shipped) and WORK/trees/patched (the same folder with the series applied by
# ci/apply_series.py; default patches/v0.5.14/series), then runs
#   tests/gpu/test_indexer_paged_mqa.py  (bench/indexer_step.py on both trees, compared)
#   tests/gpu/test_seed_draft_loop.py    (tests/gpu/seed_draft_loop_case.py on the patched tree)
# Outputs in OUT: gpu_tests.xml (junit), indexer_CARD.json (+ _pristine.json; CARD h200 or h100: card_tag),
# seed_draft_loop_CARD.json, and with --save-jit-cache jit-cache.tar.gz (restored on a later run
# from BUNDLE/jit-cache.tar.gz).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/ci/gpu_box.sh"
box_defaults run_indexer_gpu.sh "$@"
PATCHES="$REPO/patches/v0.5.14/series"
GRID=smoke
WORK=/tmp/sglpatch-gpu
BOX_OPTIONS="--grid=GRID --patches=PATCHES"
box_options "$@"
set -- "${BOX_REST[@]}"
box_start run-indexer-gpu

# 1. the trees: WORK/trees/pristine (the bundle's v0.5.14) and WORK/trees/patched (the series applied by
#    ci/apply_series.py, outside any git work tree: git apply stays honest there)
make_line_trees "$BUNDLE" "$WORK" v0.5.14 "$PATCHES" "$OUTDIR/applied_series.json" paged_mqa_layout

# 2. environment
use_bundle_env "$BUNDLE" "$WORK"
export SGLPATCH_SGLANG_TREE="$WORK/trees/patched" SGLPATCH_PRISTINE_TREE="$WORK/trees/pristine"
export SGLPATCH_INDEXER_GRID="$GRID"
export SGLPATCH_INDEXER_JSON="$OUTDIR/indexer_$(card_tag).json"
export SGLPATCH_SEED_LOOP_JSON="$OUTDIR/seed_draft_loop_$(card_tag).json"
"$PY" -c "import torch, deep_gemm, sgl_kernel; print('torch', torch.__version__, torch.cuda.get_device_name())" \
  || say "imports failed (the tests will skip with the reason)"

# 3. the tests
say "pytest (grid $GRID)"
"$PY" -m pytest -v -rA -p no:cacheprovider --junitxml "$OUTDIR/gpu_tests.xml" \
  "$REPO/tests/gpu/test_indexer_paged_mqa.py" "$REPO/tests/gpu/test_seed_draft_loop.py" "$@"
rc=$?
say "pytest exit $rc"

[ "$SAVE_JIT" = 1 ] && save_jit_cache "$OUTDIR"
exit $rc
