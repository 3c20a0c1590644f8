#!/usr/bin/env bash
# The SM90 read-once paged-MQA kernel on the H200: deepseek-ai/DeepGEMM built from source (stock, with a series
# of patches applied, and optionally a third build), each checked and timed by bench/paged_mqa_read_once.py in its
# own process, then joined into one JSON and table in $OUT.  Needs only the box's torch, nvcc and g++ (no sglang, no bundle).
#
#   bash ci/run_read_once_kernel.sh --source TAR|BUNDLE --patches DIR [--base-patches DIR] [--base-source TAR]
#                                   [--base-kv-multicast SPEC] [--line-kv-multicast SPEC] [--cache DIR] [--save-builds]
#                                   [--wheel-headers DIR] [--unpack-only] [-- GRID ARGS]
#
# TAR: DeepGEMM's tree at its pinned commit with third-party/cutlass/include and third-party/fmt/include filled in
# (the submodules); or BUNDLE, the folder `python ci/gpu_bundle.py --deep-gemm deep_gemm/54e2261 --deep-gemm-patches 0
# --out .dg` writes (.dg/deep_gemm: source.tar.xz, the pin as it is, and third-party.tar.xz, whose wheel-headers/
# stand in for --wheel-headers); DIR: *.patch files applied in name order with `git apply`.  Each build uses CXX=/usr/bin/g++:
# the box's /opt/gcc wrapper links a second libstdc++ into the extension, whose metadata call then segfaults.
#   --base-patches DIR  a third build ("base", for instance the line without the patch on trial), built beside the
#                       others and timed on its request rows alone: a candidate is compared with the kernel it would
#                       replace in the same call, and where the two kernels are the same (next_n the candidate does
#                       not touch) the pair is an A/A of two processes
#   --base-source TAR   the base build from another tree (for instance DeepGEMM's nv_dev, its third-party headers
#                       filled in as in TAR above), with --base-patches applied when given
#   --base-kv-multicast SPEC  how the base build schedules rows it runs as CTA clusters ("4:2" for nv_dev: rows of 4
#                       tokens as 2-CTA clusters, one schedule entry per cluster; bench/paged_mqa.py kv_multicast)
#   --line-kv-multicast SPEC  the same for the line's build (a candidate that runs rows as clusters); "5:3@39" names the slots (clusters that fit at once)
#   --cache DIR         builds and the JIT cache from an earlier call (NAME-so.tgz with its source hash in
#                       NAME-so.sha256, jit.tgz): a build whose source hash matches is reused
#   --save-builds       write each new build and the JIT cache to OUT for such a later call (off: the device tool
#                       brings back 8 files, and the results come first)
#   --unpack-only       the trees (stock, line, base) unpacked and patched under WORK, then stop: no GPU needed
# GRID ARGS go to every grid run.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# the report's commands.device: this call as typed, with the environment that changes what it runs
export BENCH_DEVICE_COMMAND="${BENCH_DEVICE_COMMAND:-${PROFILE:+PROFILE=\"$PROFILE\" }bash ci/run_read_once_kernel.sh $*}"
OUTDIR=${OUT:-/tmp/read-once-out}
WORK=${READ_ONCE_WORK:-/tmp/sglpatch-read-once}
SOURCE= PATCHES= BASE_PATCHES= BASE_SOURCE= BASE_KV_MULTICAST= LINE_KV_MULTICAST= CACHE= WHEEL_HEADERS= SAVE_BUILDS=0
UNPACK_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --source) SOURCE=$2; shift 2 ;;
    --patches) PATCHES=$2; shift 2 ;;
    --base-patches) BASE_PATCHES=$2; shift 2 ;;
    --base-source) BASE_SOURCE=$2; shift 2 ;;
    --base-kv-multicast) BASE_KV_MULTICAST=$2; shift 2 ;;
    --line-kv-multicast) LINE_KV_MULTICAST=$2; shift 2 ;;
    --cache) CACHE=$2; shift 2 ;;
    --save-builds) SAVE_BUILDS=1; shift ;;
    --wheel-headers) WHEEL_HEADERS=$2; shift 2 ;;
    --unpack-only) UNPACK_ONLY=1; shift ;;
    --) shift; break ;;
    *) echo "run_read_once_kernel.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
{ [ -f "$SOURCE" ] || [ -f "$SOURCE/source.tar.xz" ]; } && [ -d "$PATCHES" ] \
  || { echo "run_read_once_kernel.sh: --source TAR|BUNDLE and --patches DIR are required" >&2; exit 2; }
abs() { [ -z "$1" ] || (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
SOURCE=$(abs "$SOURCE") PATCHES=$(abs "$PATCHES") BASE_PATCHES=$(abs "$BASE_PATCHES") BASE_SOURCE=$(abs "$BASE_SOURCE") CACHE=$(abs "$CACHE") WHEEL_HEADERS=$(abs "$WHEEL_HEADERS")
mkdir -p "$OUTDIR" "$WORK"
rm -rf "$WORK/base" "$WORK"/*.json  # a warm box keeps /tmp: no earlier call's rows in this call's report
exec > >(tee "$OUTDIR/read_once_kernel.log") 2>&1
T0=$(date +%s)
say() { echo "[read-once +$(( $(date +%s) - T0 ))s] $*"; }
PY=python3
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} DG_JIT_CACHE_DIR=$WORK/jit PYTHONUNBUFFERED=1
HEADERS="impls/sm90_fp8_paged_mqa_logits.cuh scheduler/sm90_paged_mqa_logits.cuh mma/sm90.cuh"

tree_hash() { (cd "$1" && find csrc deep_gemm -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cuh' -o -name '*.py' \) | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16); }

# unpack NAME TAR|BUNDLE [PATCHES]: WORK/NAME/DeepGEMM from TAR (or a bundle's two archives), patched when PATCHES is given
unpack() {
  rm -rf "$WORK/$1" && mkdir -p "$WORK/$1" || return 1
  local d="$WORK/$1/DeepGEMM"
  if [ -d "$2" ]; then
    tar xJf "$2/source.tar.xz" -C "$WORK/$1" && tar xJf "$2/third-party.tar.xz" -C "$d" third-party || return 1
  else
    tar xf "$2" -C "$WORK/$1" || return 1
  fi
  if [ -n "${3:-}" ]; then
    ( cd "$d" && git init -q && for p in "$3"/*.patch; do git apply "$p" && echo "applied $(basename "$p")" || exit 1; done ) || return 1
  fi
  cp -r "$d/third-party/cutlass/include/cute" "$d/third-party/cutlass/include/cutlass" "$d/deep_gemm/include/"
}

# build NAME: the extension in place, or the cached one when its source hash matches
build() {
  local d="$WORK/$1/DeepGEMM" hash; hash=$(tree_hash "$d")
  if [ -n "$CACHE" ] && [ -f "$CACHE/$1-so.tgz" ] && [ "$(cat "$CACHE/$1-so.sha256" 2>/dev/null)" = "$hash" ]; then
    tar xzf "$CACHE/$1-so.tgz" -C "$d" && say "$1: cached build reused (source $hash)" && return 0
  fi
  local t=$(date +%s)
  ( cd "$d" && CXX=/usr/bin/g++ CC=/usr/bin/gcc $PY setup.py -q build_ext --inplace >build.log 2>&1 ) \
    || { say "$1: build FAILED"; grep -E "error" -m 20 "$d/build.log"; return 1; }
  say "$1: built in $(( $(date +%s) - t )) s (source $hash)"
  # off by default: the device tool brings back 8 files, and the results come first
  [ "$SAVE_BUILDS" = 1 ] || return 0
  ( cd "$d" && tar czf "$OUTDIR/$1-so.tgz" deep_gemm/_C*.so ) && echo "$hash" >"$OUTDIR/$1-so.sha256"
}

facts() {  # the builds' facts, computed here: versions and the SM90 headers' sha256 beside the wheel's
  BASE_SOURCE_NAME=$([ -n "$BASE_SOURCE" ] && basename "$BASE_SOURCE") $PY - "$WORK" "$WHEEL_HEADERS" $HEADERS <<'EOF' >"$OUTDIR/deep_gemm_facts.json"
import hashlib, json, os, subprocess, sys, torch
work, wheel, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
sha = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.exists(p) else None
nvcc = subprocess.run([os.environ["CUDA_HOME"] + "/bin/nvcc", "--version"], capture_output=True, text=True).stdout
out = {"source": "deepseek-ai/DeepGEMM", "commit": "54e2261", "base_source": os.environ.get("BASE_SOURCE_NAME") or None,
       "built_with": {
    "torch": torch.__version__, "nvcc": nvcc.strip().splitlines()[-1], "cxx": "/usr/bin/g++"}}
for build in ("stock", "line", "base"):
    if not os.path.isdir(f"{work}/{build}"):
        continue
    inc = f"{work}/{build}/DeepGEMM/deep_gemm/include/deep_gemm"
    out[build] = {h: sha(f"{inc}/{h}") for h in headers}
if wheel:
    out["wheel_sgl_deep_gemm_0.2.3.post2"] = {h: sha(f"{wheel}/{h}") for h in headers}
    out["headers_identical_to"] = ("sgl-deep-gemm 0.2.3.post2"
        if out["stock"] == out["wheel_sgl_deep_gemm_0.2.3.post2"] else None)
print(json.dumps(out, indent=1))
EOF
}

if [ -d "$SOURCE" ] && [ -z "$WHEEL_HEADERS" ]; then
  WHEEL_HEADERS=$WORK/bundle-headers/wheel-headers
  rm -rf "$WORK/bundle-headers" && mkdir -p "$WORK/bundle-headers" \
    && tar xJf "$SOURCE/third-party.tar.xz" -C "$WORK/bundle-headers" wheel-headers || exit 1
fi
if [ "$UNPACK_ONLY" = 1 ]; then
  unpack stock "$SOURCE" && unpack line "$SOURCE" "$PATCHES" || exit 1
  [ -z "$BASE_PATCHES$BASE_SOURCE" ] || unpack base "${BASE_SOURCE:-$SOURCE}" "$BASE_PATCHES" || exit 1
  say "unpacked under $WORK (wheel headers: ${WHEEL_HEADERS:-none})"
  exit 0
fi
say "box: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $($PY -c 'import torch; print(torch.__version__)')"
[ -n "$CACHE" ] && [ -f "$CACHE/jit.tgz" ] && mkdir -p "$DG_JIT_CACHE_DIR" && tar xzf "$CACHE/jit.tgz" -C "$DG_JIT_CACHE_DIR" && say "JIT cache restored"
# the two builds side by side (each one compiler process at a time; the box has 16 cores)
( unpack stock "$SOURCE" && build stock ) & stock_pid=$!
( unpack line "$SOURCE" "$PATCHES" && build line ) & line_pid=$!
base_ok=0
WITH_BASE=$([ -n "$BASE_PATCHES$BASE_SOURCE" ] && echo 1)
[ -n "$WITH_BASE" ] && { ( unpack base "${BASE_SOURCE:-$SOURCE}" "$BASE_PATCHES" && build base ) & base_pid=$!; }
line_ok=1
wait $line_pid || line_ok=0
if [ -n "$WITH_BASE" ]; then
  wait $base_pid && base_ok=1 || say "base: build failed, so no base rows (the report compares with stock only)"
fi
wait $stock_pid || exit 1
facts

in_build() {  # BUILD CMD...: CMD from REPO with BUILD's DeepGEMM first on the path and its schedule convention
  local build=$1 multicast=
  shift
  case "$build" in base) multicast=$BASE_KV_MULTICAST ;; line) multicast=$LINE_KV_MULTICAST ;; esac
  ( cd "$REPO" && PAGED_MQA_KV_MULTICAST=$multicast PYTHONPATH="$WORK/$build/DeepGEMM:$REPO" "$@" )
}
grid() {  # NAME SECONDS ARGS...: one process, its own DeepGEMM first on the path, stopped after SECONDS
  local name=$1 limit=$2; shift 2
  in_build "$name" timeout -k 15 "$limit" $PY bench/paged_mqa_read_once.py grid --label "$name" --json "$WORK/$name.json" "$@" \
    || say "$name grid exit $?"
}
if [ $line_ok = 1 ]; then
  # 256 requests too: more requests than CTAs (or clusters), so each reuses its pipeline stages across requests, as
  # the grid will: a wrong barrier count or phase hangs here, within the smoke's limit, not in the grid
  say "line: smoke (every next_n, 2 and 256 requests x 4k, exactness only)"
  in_build line timeout -k 15 "${SMOKE_S:-180}" $PY bench/paged_mqa_read_once.py grid --label smoke \
    --json "$WORK/smoke.json" --batch-sizes 2 256 --ctx 4096 --reps 2 --min-calls 1 --max-calls 1 || { say "smoke failed ($?)"; line_ok=0; }
fi
[ $line_ok = 1 ] && { say "line grid"; grid line "${LINE_GRID_S:-300}" "$@"; }
[ $base_ok = 1 ] && { say "base grid (request rows)"; grid base "${BASE_GRID_S:-120}" --layouts native --fp64-max-tokens 0 "$@"; }
say "stock grid"
grid stock "${STOCK_GRID_S:-200}" --fp64-max-tokens 0 "$@"
# PROFILE="BUILD:LAYOUT:NEXT_N:B[:WEIGHTS] ...": one ncu report each (the third call of that case, after two
# warm-ups); WEIGHTS float32 (default) or bfloat16, the head weights' dtype
for spec in ${PROFILE:-}; do
  IFS=: read -r build layout n b weights <<<"$spec"
  say "ncu: $build $layout next_n $n, $b requests x 64k${weights:+, $weights weights}"
  in_build "$build" timeout 120 ncu --clock-control none \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section SchedulerStats -k regex:sm90_fp8_paged_mqa_logits --launch-skip 2 --launch-count 1 \
      $PY bench/paged_mqa_read_once.py profile --layout "$layout" --next-n "$n" --batch-size "$b" \
      ${weights:+--weights-dtype "$weights"} >>"$OUTDIR/ncu.txt" 2>&1 \
    || say "ncu exit $?"
done
[ "$SAVE_BUILDS" = 1 ] && ( cd "$WORK" && tar czf "$OUTDIR/jit.tgz" -C "$DG_JIT_CACHE_DIR" . )
runs=$(cd "$WORK" && ls line.json stock.json base.json 2>/dev/null)
tar czf "$OUTDIR/runs.tgz" -C "$WORK" $runs  # each build's own rows
( cd "$WORK" && $PY "$REPO/bench/paged_mqa_read_once.py" report $runs --deep-gemm-facts "$OUTDIR/deep_gemm_facts.json" --out "$OUTDIR" )
say "done"
