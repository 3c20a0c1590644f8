#!/usr/bin/env bash
# The indexer-level GPU test of the v0.5.23 series line on an air-gapped GPU box, from the bundle
# made by ci/gpu_bundle.py (its shared deps and sgl-kernel parts) plus its per-line part
# (`ci/gpu_bundle.py --line v0.5.23`: .gpu-bundle/v0.5.23/sglang.tar.xz, pristine sglang 0.5.23).
# Run from the repository root (the `run` tool's working directory), carrying .gpu-bundle.
#
#   bash ci/run_indexer_gpu_v0_5_23.sh [--grid smoke|full|tiny|engine64k|...] [--pages random|contiguous]
#                                      [--out DIR] [--bundle DIR] [--work DIR] [--deep-gemm wheel|source]
#                                      [-- PYTEST ARGS]
#
# --pages: how bench/indexer_step.py's fixture lays each request's pages over the KV pool, in both runs
# (default random; contiguous: one run per request, as a fresh engine's allocator does).
#
# Builds WORK/trees/pristine (sglang 0.5.23 as shipped) and WORK/trees/patched (the same with
# patches/v0.5.23/series applied by ci/apply_series.py), then runs
# tests/gpu/test_indexer_paged_mqa_v0_5_23.py (bench/indexer_step.py on both trees, compared).
#
# The shared deps were pinned for 0.5.14 (sgl-deep-gemm 0.1.5.post1, sglang-kernel 0.4.4,
# flashinfer 0.6.12) and are what loads with the box's torch 2.11: 0.5.23's own pins
# (sgl-deep-gemm 0.2.x, sglang-kernel 0.4.10 for torch 2.14.1) do not.  0.5.23's top-k picks
# sglang's JIT top-k v2 kernel by default (SGLANG_OPT_USE_TOPK_V2=1); when that kernel does not
# build here, the run falls back to 0.5.23's own switch SGLANG_OPT_USE_TOPK_V2=0 (sgl-kernel's
# fast_topk_transform_fused), and says so in OUT/topk_v2_probe.log and the JSON's env.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/ci/gpu_box.sh"
box_defaults run_indexer_gpu_v0_5_23.sh "$@"
LINE=v0.5.23
GRID=smoke
PAGES=random
WORK=/tmp/sglpatch-gpu-v0_5_23
BOX_OPTIONS="--grid=GRID --pages=PAGES"
box_options "$@"
set -- "${BOX_REST[@]}"
case "$PAGES" in random|contiguous) ;; *) echo "--pages takes random or contiguous, not '$PAGES'" >&2; exit 2 ;; esac
box_start "run-indexer-gpu-$LINE"

# 1. the trees: WORK/trees/pristine (sglang 0.5.23 as shipped) and WORK/trees/patched (the line's series)
make_line_trees "$BUNDLE" "$WORK" "$LINE" "$REPO/patches/$LINE/series" "$OUTDIR/applied_series_v0_5_23.json" \
  pick_sm90_tokens_per_row

# 2. environment (no sglang in pkgs/: each run imports its own tree)
use_bundle_env "$BUNDLE" "$WORK"
export SGLPATCH_SGLANG_TREE_V0_5_23="$WORK/trees/patched" SGLPATCH_PRISTINE_TREE_V0_5_23="$WORK/trees/pristine"
export SGLPATCH_INDEXER_GRID="$GRID" SGLPATCH_INDEXER_PAGES="$PAGES"
export SGLPATCH_INDEXER_JSON="$OUTDIR/indexer_$(card_tag)_v0_5_23.json"
"$PY" -c "import torch, deep_gemm, sgl_kernel; from importlib.metadata import version as v; \
print('torch', torch.__version__, torch.cuda.get_device_name(), 'deep_gemm', deep_gemm.__file__, 'sgl-kernel', v('sglang-kernel'))" \
  || say "imports failed (the tests will skip with the reason)"

# 3. 0.5.23's default top-k (sglang's JIT top-k v2): does it build and load here?
( cd "$WORK/trees/pristine" && timeout 300 "$PY" -c "
import torch
from sglang.kernels.ops.attention.dsv4 import topk
topk._jit_topk_v2_module()
print('top-k v2 JIT module built and loaded')
" ) >"$OUTDIR/topk_v2_probe.log" 2>&1
if [ $? -ne 0 ]; then
  export SGLANG_OPT_USE_TOPK_V2=0
  say "top-k v2 JIT module did not build/load (tail below); running with SGLANG_OPT_USE_TOPK_V2=0"
  tail -5 "$OUTDIR/topk_v2_probe.log"
else
  say "$(tail -1 "$OUTDIR/topk_v2_probe.log")"
fi

# 4. the test
say "pytest (grid $GRID, pages $PAGES)"
"$PY" -m pytest -v -rA -p no:cacheprovider --junitxml "$OUTDIR/gpu_tests_v0_5_23.xml" \
  "$REPO/tests/gpu/test_indexer_paged_mqa_v0_5_23.py" "$@"
rc=$?
say "pytest exit $rc"
exit $rc
