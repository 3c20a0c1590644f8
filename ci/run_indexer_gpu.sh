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
# Outputs in OUT: gpu_tests.xml (junit), indexer_h200.json (+ _pristine.json),
# seed_draft_loop_h200.json, and with --save-jit-cache jit-cache.tar.gz (restored on a later run
# from BUNDLE/jit-cache.tar.gz).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/ci/gpu_box.sh"
export SGLPATCH_RUN_COMMAND="bash ci/run_indexer_gpu.sh $*"
BUNDLE="$REPO/.gpu-bundle"
PATCHES="$REPO/patches/v0.5.14/series"
GRID=smoke
OUTDIR="${OUT:-$REPO/.gpu-bundle/results}"
WORK=/tmp/sglpatch-gpu
SAVE_JIT=0
PY="${PYTHON:-python3}"
while [ $# -gt 0 ]; do
  case "$1" in
    --grid) GRID="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --patches) PATCHES="$2"; shift 2 ;;
    --bundle) BUNDLE="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --save-jit-cache) SAVE_JIT=1; shift ;;
    --) shift; break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUTDIR"
T0=$(date +%s)
say() { echo "[run-indexer-gpu +$(( $(date +%s) - T0 ))s] $*"; }
say "box: $(nvidia-smi -L 2>/dev/null | head -1); python: $($PY -V 2>&1)"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"

# 1. unpack: site/ (deps), pkgs/ (sgl_kernel, triton_kernels), trees/{pristine,patched}/sglang
rm -rf "$WORK" && mkdir -p "$WORK/trees/pristine" "$WORK/trees/patched"
unpack_bundle "$BUNDLE" "$WORK"
mv "$WORK/pkgs/sglang" "$WORK/trees/pristine/sglang"
cp -a "$WORK/trees/pristine/sglang" "$WORK/trees/patched/sglang"
say "unpacked into $WORK"

# 2. the series onto the patched tree (outside any git work tree: git apply stays honest there)
"$PY" "$REPO/ci/apply_series.py" "$PATCHES" --root "$WORK/trees/patched" --record "$OUTDIR/applied_series.json" \
  || { echo "patch series did not apply" >&2; exit 4; }
grep -q paged_mqa_layout "$WORK/trees/patched/sglang/srt/layers/attention/dsa_backend.py" \
  || { echo "series reported applied but dsa_backend.py has no paged_mqa_layout" >&2; exit 4; }

# 3. environment
use_bundle_env "$BUNDLE" "$WORK"
export SGLPATCH_SGLANG_TREE="$WORK/trees/patched" SGLPATCH_PRISTINE_TREE="$WORK/trees/pristine"
export SGLPATCH_INDEXER_GRID="$GRID"
export SGLPATCH_INDEXER_JSON="$OUTDIR/indexer_h200.json"
export SGLPATCH_SEED_LOOP_JSON="$OUTDIR/seed_draft_loop_h200.json"
"$PY" -c "import torch, deep_gemm, sgl_kernel; print('torch', torch.__version__, torch.cuda.get_device_name())" \
  || say "imports failed (the tests will skip with the reason)"

# 4. the tests
say "pytest (grid $GRID)"
"$PY" -m pytest -v -rA -p no:cacheprovider --junitxml "$OUTDIR/gpu_tests.xml" \
  "$REPO/tests/gpu/test_indexer_paged_mqa.py" "$REPO/tests/gpu/test_seed_draft_loop.py" "$@"
rc=$?
say "pytest exit $rc"

if [ "$SAVE_JIT" = 1 ]; then
  tar -czf "$OUTDIR/jit-cache.tar.gz" -C "$WORK" jit 2>/dev/null
  say "saved JIT caches: $(du -sh "$OUTDIR/jit-cache.tar.gz" | cut -f1)"
fi
exit $rc
