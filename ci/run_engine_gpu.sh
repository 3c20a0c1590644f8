#!/usr/bin/env bash
# sglang's own engine with MTP, pristine against patched, on an air-gapped GPU box (bench/engine_ab.py),
# from the bundle made by ci/gpu_bundle.py. Run from the repository root, carrying .gpu-bundle.
#
#   bash ci/run_engine_gpu.sh [--line v0.5.14|v0.5.23] [--out DIR] [--bundle DIR] [--work DIR]
#                             [--save-jit-cache] [--sglang-tests GLOB [--sglang-tests-s SECONDS]] [--aa-only]
#                             [-- ENGINE_AB ARGS]   (e.g. -- --next-n 2,4 --grid full)
#
# Builds WORK/trees/{pristine,patched} for the line (ci/gpu_box.sh make_line_trees), then runs
# bench/engine_ab.py with both trees; writes OUT/engine_CARD[_LINE].json (CARD h200 or h100: ci/gpu_box.sh
# card_tag) and the engines' logs (OUT/engine_logs.tar.gz), and with --save-jit-cache OUT/jit-cache.tar.gz (restored on a later
# run from BUNDLE/jit-cache.tar.gz). With --sglang-tests GLOB it first runs the series' tests in
# sglang's tree whose file names match GLOB ('test_*.py': all of them) on the patched tree (pytest,
# at most --sglang-tests-s seconds, default 240; junit in OUT/sglang_test[_LINE].xml), and then the
# engines, whatever the tests' outcome.
#
# Environment for both engines: SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=0 (the dense-MHA
# prefill shortcut for short KV calls FA3, which the bundle leaves out). On v0.5.23 the run also sets
# sglang's own SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1: 0.5.23 asks for sglang-kernel >= 0.4.9, which
# needs torch 2.14.1; the box's torch 2.11 loads 0.4.4 only. Every row of such a run says so.
#
# Everything after -- goes to bench/engine_ab.py as it is: `-- --patched-only --grid wide64k ...` starts the
# patched engine alone (its own host and GPU times, nothing compared; --pristine is still passed, unused).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/ci/gpu_box.sh"
box_defaults run_engine_gpu.sh "$@"
LINE=v0.5.14
WORK=/tmp/sglpatch-engine
SGLANG_TESTS=
SGLANG_TESTS_S=240
AA_ONLY=0
BOX_OPTIONS="--line=LINE --sglang-tests=SGLANG_TESTS --sglang-tests-s=SGLANG_TESTS_S"
BOX_FLAGS="--aa-only=AA_ONLY"
box_options "$@"
set -- "${BOX_REST[@]}"
box_start "run-engine-gpu-$LINE"
SUFFIX=$([ "$LINE" = v0.5.14 ] && echo "" || echo "_${LINE//./_}")

make_line_trees "$BUNDLE" "$WORK" "$LINE" "$REPO/patches/$LINE/series" "$OUTDIR/applied_series$SUFFIX.json"
use_bundle_env "$BUNDLE" "$WORK"
ENV_ARGS=(--env SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=0)
[ "$LINE" = v0.5.14 ] || ENV_ARGS+=(--env SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1)

if [ -n "$SGLANG_TESTS" ]; then
  mapfile -t TESTS < <(series_sglang_tests "$WORK/trees/patched" "$SGLANG_TESTS")
  [ "${#TESTS[@]}" -gt 0 ] || { echo "no test of the series in sglang's tree matches '$SGLANG_TESTS'" >&2; exit 2; }
  sglang_test_shims "$WORK/shims"
  say "the series' tests in sglang's tree (at most ${SGLANG_TESTS_S} s): ${TESTS[*]}"
  (cd "$WORK/trees/patched" && PYTHONPATH="$WORK/trees/patched:$PYTHONPATH:$WORK/shims" \
    timeout --kill-after=10 "$SGLANG_TESTS_S" "$PY" -m pytest -p no:cacheprovider -rA -o junit_family=xunit1 \
    --junitxml "$OUTDIR/sglang_test$SUFFIX.xml" "${TESTS[@]}")
  say "sglang-tree tests: exit $?"
fi

# --aa-only: the engine labelled patched runs the pristine tree too (an A/A call: two pristine processes, every run
# of the call in their floor; the JSON's meta.patched_is_pristine and its notes say so)
PATCHED_TREE=$([ "$AA_ONLY" = 1 ] && echo pristine || echo patched)

save_engine_logs() {
  tar -czf "$OUTDIR/engine_logs$SUFFIX.tar.gz" -C "$WORK/engine" $(cd "$WORK/engine" && ls -d engine-*.log probe-* 2>/dev/null) 2>/dev/null
}
# A run stopped from outside (an outer `timeout`) still brings back the engines' logs: the driver runs in
# the background so that TERM reaches this trap at once, not when the driver ends.
trap 'say "stopped from outside: saving the engine logs"; save_engine_logs; exit 143' TERM INT
"$PY" "$REPO/bench/engine_ab.py" --line "$LINE" \
  --pristine "$WORK/trees/pristine" --patched "$WORK/trees/$PATCHED_TREE" \
  --extra-path "${DEEP_GEMM_PATH:+$DEEP_GEMM_PATH:}$WORK/pkgs:$WORK/site" "${ENV_ARGS[@]}" \
  --workdir "$WORK/engine" --out "$OUTDIR/engine_$(card_tag)$SUFFIX.json" --series-record "$OUTDIR/applied_series$SUFFIX.json" \
  --command "$SGLPATCH_RUN_COMMAND" "$@" &
wait $!
rc=$?
trap - TERM INT
say "engine_ab exit $rc"
save_engine_logs
[ "$SAVE_JIT" = 1 ] && save_jit_cache "$OUTDIR"
exit $rc
