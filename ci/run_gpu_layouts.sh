#!/usr/bin/env bash
# The SM90 paged-MQA row-width measurements of issues 22 and 23, for both series lines, in one GPU
# call of at most 8 minutes. Run from the repository root on the GPU box, carrying .gpu-bundle
# (ci/gpu_bundle.py, with --line v0.5.23 for the second line):
#
#   bash ci/run_gpu_layouts.sh --out $OUT [--bundle DIR] [--work DIR] [--budget SECONDS]
#                              [--lines "v0.5.23 v0.5.14"] [--no-holdout] [--chunking]
#                              [--save-jit-cache] [--rehearse]
#
# Parts, each with its own time limit; a part that fails or runs out of time is recorded and the
# run goes on (OUT/summary.json lists every part's exit status):
#   apply-<line>            both trees of each line from the bundle: pristine, and patched by
#                           ci/apply_series.py (its test in sglang's tree under ROOT/test/)
#   topk-v2-probe-v0.5.23   in the background: 0.5.23's JIT top-k v2 built once (its cache is shared);
#                           if it cannot build, the v0.5.23 parts run with SGLANG_OPT_USE_TOPK_V2=0
#   warm-deepgemm           DeepGEMM's paged-MQA kernels for every row count, compiled in parallel
#   chunking                with --chunking: bench/paged_mqa_chunking.py (DeepGEMM alone: one paged-MQA
#                           call over all rows against sglang 0.5.23's chunks), OUT/paged_mqa_chunking_CARD.json
#   sglang-test-<line>      the series' tests in sglang's tree (every test the series puts under
#                           test/registered), from the patched tree, with pytest
#   pristine-<line>         bench/indexer_step.py on the pristine tree, grid "identity" (10 cases) on
#                           a fixture sized for the hold-out grids, its per-token top-k saved for the
#                           patched run to compare
#   holdout-<line>          bench/indexer_step.py on the patched tree, grids "holdout" (issue 22)
#                           and "odd" (issue 23: next_n 3, 5, 6 at 32-128 requests; odd next_n is
#                           per-token in this series), CUDA graphs, chosen rows vs forced per-token
#                           (SGLANG_DSA_PAGED_MQA_FORCE_PER_TOKEN=1), top-k and logits compared,
#                           timings interleaved
#   report                  bench/layouts_report.py: the criteria, printed and in OUT/summary.json
# The v0.5.23 line goes first (it is the one that goes upstream); v0.5.14's hold-out run comes last
# and writes its JSON after every case, so a run cut short by the budget keeps what it measured.
# --lines runs only the lines named; --no-holdout leaves out the pristine identity and hold-out parts.
#
# Files in OUT (7 at most): run.log, summary.json, indexer_holdout_CARD.json (CARD h200 or h100: card_tag),
# indexer_holdout_CARD_v0_5_23.json, sglang_test_v0_5_14.xml, sglang_test_v0_5_23.xml and, with
# --save-jit-cache, jit-cache.tar.gz (for the next bundle).
#
# --rehearse: the same plumbing on a CPU machine, without a bundle: the trees from the wheels in the
# sglpatch cache, the sglang-tree tests (they skip without a GPU), bench/indexer_step.py --plan
# (case counts and the time estimate), the report; no GPU part runs.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE="$REPO/.gpu-bundle"
OUTDIR="${OUT:-$REPO/build/gpu-layouts}"
WORK=/tmp/sglpatch-layouts
BUDGET=465
SAVE_JIT=0
REHEARSE=0
HOLDOUT=1
CHUNKING=0
LINE_ARG="v0.5.23 v0.5.14"
PY="${PYTHON:-python3}"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUTDIR="$2"; shift 2 ;;
    --bundle) BUNDLE="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --save-jit-cache) SAVE_JIT=1; shift ;;
    --rehearse) REHEARSE=1; shift ;;
    --lines) LINE_ARG="$2"; shift 2 ;;
    --no-holdout) HOLDOUT=0; shift ;;
    --chunking) CHUNKING=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
case "$BUDGET" in ''|*[!0-9]*) echo "--budget takes whole seconds, got '$BUDGET'" >&2; exit 2 ;; esac
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
. "$REPO/ci/gpu_box.sh"
fresh_work "$WORK" /tmp/sglpatch-layouts || exit 2
exec > >(tee -a "$OUTDIR/run.log") 2>&1

T0=$(date +%s)
DEADLINE=$((T0 + BUDGET))
PARTS="$WORK/parts.tsv"
: >"$PARTS"
say() { echo "[gpu-layouts +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
read -r -a LINES <<<"$LINE_ARG"
for line in "${LINES[@]}"; do
  case "$line" in v0.5.14|v0.5.23) ;; *) echo "--lines takes v0.5.14 and v0.5.23, got '$line'" >&2; exit 2 ;; esac
done
slug() { echo "${1//./_}"; }

# part NAME LIMIT CMD...: run CMD (a command or one of the functions below, exported) with at most
# LIMIT seconds and never past the budget; record its exit status (124: out of time; "skipped": no
# time left) and seconds in WORK/parts.tsv.
part() {
  local name="$1" limit="$2" rc start
  shift 2
  local budget_left
  budget_left=$(( $(left) - 10 ))
  [ "$limit" -gt "$budget_left" ] && limit=$budget_left
  if [ "$limit" -lt 15 ]; then
    say "$name: not run (no time left in the ${BUDGET} s budget)"
    printf '%s\tskipped\t0\n' "$name" >>"$PARTS"
    return 0
  fi
  say "$name (at most ${limit} s)"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" bash -c '"$@"' _ "$@"
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - start ))" >>"$PARTS"
  say "$name: exit $rc in $(( $(date +%s) - start )) s"
  return 0
}

say "box: $(nvidia-smi -L 2>/dev/null | head -1 || echo 'no nvidia-smi'); python: $($PY -V 2>&1); budget ${BUDGET} s"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

# --- the trees -----------------------------------------------------------------------------------
trees_from_bundle() {
  unpack_bundle "$BUNDLE" "$WORK"  # deps -> WORK/site, sgl-kernel and sglang (v0.5.14) -> WORK/pkgs
  mkdir -p "$WORK/trees/v0.5.14/pristine" "$WORK/trees/v0.5.23/pristine"
  [ ! -d "$WORK/pkgs/sglang" ] || mv "$WORK/pkgs/sglang" "$WORK/trees/v0.5.14/pristine/sglang"  # absent: a v0.5.23-only call
  [ -f "$BUNDLE/v0.5.23/sglang.tar.xz" ] || { echo "missing $BUNDLE/v0.5.23/sglang.tar.xz (ci/gpu_bundle.py --line v0.5.23)"; return 3; }
  extract_archive "$BUNDLE/v0.5.23/sglang.tar.xz" "$WORK/line-v0.5.23" || return 3
  mv "$WORK/line-v0.5.23/pkgs/sglang" "$WORK/trees/v0.5.23/pristine/sglang"
}

trees_from_wheels() {  # --rehearse: the pinned wheels make apply downloaded
  local line wheel
  for line in v0.5.23 v0.5.14; do
    wheel=$(ls "${SGLPATCH_CACHE:-$HOME/.cache/sglpatch}"/wheels/sglang-"${line#v}"-*.whl 2>/dev/null | head -1)
    [ -n "$wheel" ] || { echo "no sglang ${line#v} wheel in the sglpatch cache: run make apply LINE=$line once"; return 3; }
    mkdir -p "$WORK/trees/$line/pristine"
    "$PY" - "$wheel" "$WORK/trees/$line/pristine" <<'PYEOF' || return 3
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf:
    zf.extractall(sys.argv[2], [n for n in zf.namelist() if n.startswith("sglang/") and not n.endswith(".so")])
PYEOF
  done
}

apply_line() {
  local line="$1" root="$WORK/trees/$1"
  cp -a "$root/pristine" "$root/patched" &&
    "$PY" "$REPO/ci/apply_series.py" "$REPO/patches/$line/series" --root "$root/patched" \
      --record "$WORK/applied_$(slug "$line").json" &&
    [ -n "$(series_sglang_tests "$root/patched")" ]
}

export REPO BUNDLE OUTDIR WORK PY REHEARSE T0
export -f say slug extract_archive unpack_bundle trees_from_bundle trees_from_wheels series_sglang_tests apply_line
if [ "$REHEARSE" = 1 ]; then
  part unpack 120 trees_from_wheels
  JIT="$WORK/jit"; mkdir -p "$JIT"
  export DG_JIT_CACHE_DIR="$JIT/deep_gemm" TRITON_CACHE_DIR="$JIT/triton"
else
  part unpack 120 trees_from_bundle
  use_bundle_env "$BUNDLE" "$WORK"  # the unpacked deps first on PYTHONPATH; JIT caches in JIT_ROOT/jit
fi
for line in "${LINES[@]}"; do part "apply-$line" 60 apply_line "$line"; done

# stand-ins for what sglang's test utilities import at module level but the box may lack (the
# sglang-tree test imports sglang.test.test_utils for CustomTestCase): never used by the tests
SHIMS="$WORK/shims"
sglang_test_shims "$SHIMS"
if [ "$REHEARSE" = 1 ] && ! "$PY" -c "import torchvision" 2>/dev/null; then
  cat >"$SHIMS/sitecustomize.py" <<PYEOF
import sys
sys.path.insert(0, "$REPO/scripts")
from sglpatch.rebase.cpu_standins import install_torchvision_standin  # the CPU tests' stand-in

install_torchvision_standin()
PYEOF
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SHIMS"

# --- kernels compiled ahead of the timed parts -----------------------------------------------------
probe_topk_v2() {
  cd "$WORK/trees/v0.5.23/pristine" && "$PY" -c "
from sglang.kernels.ops.attention.dsv4 import topk
topk._jit_topk_v2_module()
print('top-k v2 JIT module built and loaded')"
}
PROBE_PID=
if [ "$REHEARSE" = 1 ]; then
  printf 'topk-v2-probe-v0.5.23\tskipped\t0\nwarm-deepgemm\tskipped\t0\n' >>"$PARTS"
  say "rehearsal: no top-k v2 probe, no DeepGEMM warm-up (no GPU)"
else
  export -f probe_topk_v2
  ( start=$(date +%s); timeout --kill-after=10 300 bash -c probe_topk_v2 >"$WORK/topk_v2_probe.log" 2>&1; rc=$?
    printf 'topk-v2-probe-v0.5.23\t%s\t%s\n' "$rc" "$(( $(date +%s) - start ))" >>"$PARTS"; exit $rc ) &
  PROBE_PID=$!
  part warm-deepgemm 150 "$PY" "$REPO/ci/warm_deepgemm_jit.py" --max-rows 768 --jobs 8
  [ "$CHUNKING" = 1 ] && part chunking 200 "$PY" "$REPO/bench/paged_mqa_chunking.py" --out "$OUTDIR" --deadline-s 150
fi

# --- per line ------------------------------------------------------------------------------------
sglang_test() {  # LINE: the series' test in sglang's tree, from the patched tree (PYTHONPATH -> it)
  local root="$WORK/trees/$1/patched"
  local tests
  mapfile -t tests < <(series_sglang_tests "$root")
  cd "$root" && PYTHONPATH="$root:$PYTHONPATH" "$PY" -m pytest -p no:cacheprovider -rA -o junit_family=xunit1 \
    --junitxml "$OUTDIR/sglang_test_$(slug "$1").xml" "${tests[@]}"
}
indexer_run() {  # LINE LABEL GRID JSON [extra args]: bench/indexer_step.py, CUDA graphs
  local line="$1" label="$2" grid="$3" json="$4"
  shift 4
  local plan=
  [ "$REHEARSE" = 1 ] && plan=--plan
  "$PY" "$REPO/bench/indexer_step.py" --tree "$WORK/trees/$line/$label" --label "$label" --grid "$grid" \
    --modes graph --iters 10 --reps 5 --json "$json" $plan "$@" \
    --command "bash ci/run_gpu_layouts.sh (part $label-$line): bench/indexer_step.py --label $label --grid $grid --modes graph --iters 10 --reps 5"
}
result_json() { [ "$1" = v0.5.14 ] && echo "$OUTDIR/indexer_holdout_$(card_tag).json" || echo "$OUTDIR/indexer_holdout_$(card_tag)_$(slug "$1").json"; }
export -f sglang_test indexer_run

# The pristine identity run sizes its fixture for the hold-out grids: its top-k are KV slots of
# that fixture, and the hold-out run compares them on its own (bench/indexer_step.py refuses a
# dump of another size).
HOLDOUT_GRIDS=holdout,odd
run_line_checks() {  # LINE: the sglang-tree test and the pristine identity subset
  local line="$1"
  part "sglang-test-$line" 180 sglang_test "$line"
  part "pristine-$line" 120 indexer_run "$line" pristine identity "$WORK/pristine_identity_$(slug "$line").json" \
    --dump-topk "$WORK/pristine_topk_$(slug "$line")" --fixture-grid "$HOLDOUT_GRIDS"
}
run_line_holdout() {  # LINE LIMIT
  part "holdout-$1" "$2" indexer_run "$1" patched "$HOLDOUT_GRIDS" "$(result_json "$1")" \
    --compare-topk "$WORK/pristine_topk_$(slug "$1")"
}

has_line() { [[ " ${LINES[*]} " == *" $1 "* ]]; }
if [ "$HOLDOUT" = 1 ]; then
  has_line v0.5.14 && run_line_checks v0.5.14  # while top-k v2 builds
else
  has_line v0.5.14 && part "sglang-test-v0.5.14" 180 sglang_test v0.5.14
fi
if [ -n "$PROBE_PID" ] && ! wait "$PROBE_PID"; then
  say "top-k v2 did not build or load (tail of its log below); v0.5.23 runs with SGLANG_OPT_USE_TOPK_V2=0"
  tail -3 "$WORK/topk_v2_probe.log"
  export SGLANG_OPT_USE_TOPK_V2=0
fi
if has_line v0.5.23; then
  if [ "$HOLDOUT" = 1 ]; then
    run_line_checks v0.5.23
    run_line_holdout v0.5.23 200
  else
    part "sglang-test-v0.5.23" 180 sglang_test v0.5.23
  fi
fi
unset SGLANG_OPT_USE_TOPK_V2
[ "$HOLDOUT" = 1 ] && has_line v0.5.14 && run_line_holdout v0.5.14 "$(( $(left) - 20 ))"

# --- report --------------------------------------------------------------------------------------
if [ "$HOLDOUT" = 1 ]; then
  # the lines this call ran (--lines): a line left out is not a missing run
  RESULTS=()
  for line in "${LINES[@]}"; do RESULTS+=("$(result_json "$line")"); done
  "$PY" "$REPO/bench/layouts_report.py" "${RESULTS[@]}" --parts "$PARTS" --summary "$OUTDIR/summary.json"
  report_rc=$?
else  # no hold-out rows to judge: the parts' exit statuses are the verdict
  cp "$PARTS" "$OUTDIR/parts.tsv" && cat "$PARTS"
  ! cut -f2 "$PARTS" | grep -qv '^0$'
  report_rc=$?
fi
if [ "$SAVE_JIT" = 1 ] && [ -d "$JIT" ]; then
  save_jit_cache "$OUTDIR"
fi
say "done in $(( $(date +%s) - T0 )) s; files: $(ls "$OUTDIR" | tr '\n' ' ')"
exit $report_rc
