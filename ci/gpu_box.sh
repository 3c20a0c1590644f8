# Sourced by every runner in ci/ on the GPU box: their defaults, options and start, the bundle's
# unpacking, the trees of a series line, and the environment (import path, JIT caches) they need.
# Expects PY (a python) and a `say` function to be defined by the caller (box_defaults sets PY,
# box_start defines say).

# box_defaults RUNNER ARGS...: what a runner starts from before its own defaults and box_options:
# SGLPATCH_RUN_COMMAND (exported: "bash ci/RUNNER ARGS...", the command as run, for its results),
# BUNDLE (REPO/.gpu-bundle), OUTDIR ($OUT, else REPO/.gpu-bundle/results), SAVE_JIT=0 and PY ($PYTHON,
# else python3).
box_defaults() {
  local runner="$1"
  shift
  export SGLPATCH_RUN_COMMAND="bash ci/$runner $*"
  BUNDLE="$REPO/.gpu-bundle"
  OUTDIR="${OUT:-$REPO/.gpu-bundle/results}"
  SAVE_JIT=0
  PY="${PYTHON:-python3}"
}

# box_options "$@": the options every runner takes: --out DIR, --bundle DIR, --work DIR,
# --save-jit-cache, --deep-gemm wheel|source (DEEP_GEMM: sgl-deep-gemm 0.1.5.post1 from the bundle's deps, or
# DeepGEMM built from the bundle's source by ci/build_deep_gemm.sh; default $SGLPATCH_DEEP_GEMM, else wheel),
# --deep-gemm-cxx PATH (the C++ compiler of that build); and the runner's own value options, named in BOX_OPTIONS as "--flag=VAR ..."
# (e.g. "--grid=GRID --patches=PATCHES"), or flags in BOX_FLAGS as "--flag=VAR" (set to 1). Sets
# OUTDIR, BUNDLE, WORK, SAVE_JIT and those variables; the words after `--` land in BOX_REST.
# An unknown option is refused (exit 2).
box_options() {
  BOX_REST=()
  BOX_WORK_DEFAULT="${WORK:-}"
  local pair matched
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) OUTDIR="$2"; shift 2; continue ;;
      --bundle) BUNDLE="$2"; shift 2; continue ;;
      --work) WORK="$2"; shift 2; continue ;;
      --save-jit-cache) SAVE_JIT=1; shift; continue ;;
      --deep-gemm) DEEP_GEMM="$2"; shift 2; continue ;;
      --deep-gemm-cxx) DEEP_GEMM_CXX="$2"; shift 2; continue ;;
      --) shift; BOX_REST=("$@"); return 0 ;;
    esac
    matched=0
    for pair in ${BOX_OPTIONS:-}; do
      if [ "$1" = "${pair%%=*}" ]; then printf -v "${pair#*=}" '%s' "$2"; shift 2; matched=1; break; fi
    done
    for pair in ${BOX_FLAGS:-}; do
      [ "$matched" = 0 ] || break
      if [ "$1" = "${pair%%=*}" ]; then printf -v "${pair#*=}" '%s' 1; shift; matched=1; fi
    done
    [ "$matched" = 1 ] || { echo "unknown argument: $1" >&2; exit 2; }
  done
}

# fresh_work DIR [DEFAULT]: DIR emptied for this run's scratch, and marked (.sglpatch-work). Only a folder a runner
# marked, an empty one or the runner's own DEFAULT (BOX_WORK_DEFAULT) is removed: --work naming a folder of the
# user's is refused, exit 2, nothing removed.
fresh_work() {
  local dir="$1" default="${2:-${BOX_WORK_DEFAULT:-}}"
  if [ "$dir" != "$default" ] && [ ! -e "$dir/.sglpatch-work" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    echo "$dir is not a work folder a runner made (no .sglpatch-work in it): name a new or empty one with" \
      "--work; nothing was changed" >&2
    exit 2
  fi
  rm -rf "$dir" && mkdir -p "$dir" && : >"$dir/.sglpatch-work"
}

# box_start NAME: the output folder, a clock and `say` (lines prefixed [NAME +Ns]), the box's GPU and
# python in the log, CUDA_HOME.
box_start() {
  BOX_NAME="$1"
  mkdir -p "$OUTDIR" || exit 2
  T0=$(date +%s)
  say() { echo "[$BOX_NAME +$(( $(date +%s) - T0 ))s] $*"; }
  say "box: $(nvidia-smi -L 2>/dev/null | head -1); python: $($PY -V 2>&1)"
  export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
}

# card_tag: the box's GPU as result files name it (h200, h100; gpu for another card or none): a call that asks for
# an H200 may be given an H100, and a file named for the wrong card is a wrong row.
card_tag() {
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H200*) echo h200 ;;
    *H100*) echo h100 ;;
    *) echo gpu ;;
  esac
}

# extract_archive ARCHIVE DEST: a bundle archive (tar.xz, members site/... or pkgs/...) into DEST, with
# tarfile's "data" rules (no absolute paths, links out of DEST or device files), on any Python 3.11 (ci/untar.py:
# the filter itself came in 3.11.4); fails if it cannot.
# GPU_BOX_CI: this folder, found once here and exported, since a runner may call extract_archive from a
# `bash -c` child (export -f), where BASH_SOURCE names no file (run_gpu_layouts.sh's parts did: exit 3).
GPU_BOX_CI=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GPU_BOX_CI
extract_archive() {
  "$PY" "$GPU_BOX_CI/untar.py" "$1" "$2"
}

# unpack_bundle BUNDLE WORK: deps -> WORK/site, sgl-kernel and sglang -> WORK/pkgs (exit 3 if missing). sglang.tar.xz
# (v0.5.14's sglang) may be left behind by a call on a newer line that must save room (the 64 MiB a call carries):
# unpack_line_sglang refuses v0.5.14 without it.
unpack_bundle() {
  local bundle="$1" work="$2" a
  for a in deps sgl-kernel; do
    [ -f "$bundle/$a.tar.xz" ] || { echo "missing $bundle/$a.tar.xz (run ci/gpu_bundle.py)" >&2; exit 3; }
  done
  for a in deps sgl-kernel sglang; do
    [ -f "$bundle/$a.tar.xz" ] || continue
    extract_archive "$bundle/$a.tar.xz" "$work" || exit 3
  done
}

# use_bundle_env BUNDLE WORK: the unpacked packages first on the path; JIT caches under JIT_ROOT/jit
# (SGLPATCH_JIT_ROOT, default /tmp/sglpatch-jit), restored from BUNDLE/jit-cache.tar.gz when an earlier
# run saved one (or from jit-cache.tar.xz, the same recompressed to fit the 64 MiB a call carries).
# JIT_ROOT is not under WORK, which every run rebuilds: a second call on a box still warm finds the
# kernels the first one compiled, whether or not they were carried. Sets JIT and JIT_ROOT.
use_bundle_env() {
  local bundle="$1" work="$2"
  export PYTHONPATH="$work/pkgs:$work/site${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
  JIT_ROOT="${SGLPATCH_JIT_ROOT:-/tmp/sglpatch-jit}"
  JIT="$JIT_ROOT/jit"
  export DG_JIT_CACHE_DIR="$JIT/deep_gemm" TRITON_CACHE_DIR="$JIT/triton"
  export TORCHINDUCTOR_CACHE_DIR="$JIT/inductor" XDG_CACHE_HOME="$JIT/xdg"
  # sglang sets DeepGEMM's DG_JIT_CACHE_DIR from its own SGLANG_DG_CACHE_DIR (default ~/.cache/deep_gemm),
  # and its JIT kernels and flashinfer's build under ~/.cache unless told: all of them into JIT too,
  # or a saved cache misses them and every engine start compiles them again
  export SGLANG_DG_CACHE_DIR="$JIT/deep_gemm" TVM_FFI_CACHE_DIR="$JIT/tvm-ffi" FLASHINFER_WORKSPACE_BASE="$JIT/flashinfer"
  # sglang 0.5.23 builds its JIT kernels under SGLANG_JIT_CACHE_DIR (default ~/.cache/sglang/jit), not tvm-ffi's
  export SGLANG_CACHE_DIR="$JIT/sglang" SGLANG_JIT_CACHE_DIR="$JIT/sglang-jit"
  mkdir -p "$JIT"
  use_deep_gemm "$bundle" || exit $?
  if [ -f "$bundle/jit-cache.tar.gz" ]; then
    tar -xzf "$bundle/jit-cache.tar.gz" -C "$JIT_ROOT" && say "restored JIT caches ($(du -sh "$JIT" | cut -f1))"
  elif [ -f "$bundle/jit-cache.tar.xz" ]; then  # a saved cache recompressed (xz -9e: 11 MB of gzip in 3 MB)
    tar -xJf "$bundle/jit-cache.tar.xz" -C "$JIT_ROOT" && say "restored JIT caches ($(du -sh "$JIT" | cut -f1))"
  elif ls "$bundle"/jit-cache.tar.gz.part-* >/dev/null 2>&1; then
    cat "$bundle"/jit-cache.tar.gz.part-* | tar -xz -C "$JIT_ROOT" && say "restored JIT caches ($(du -sh "$JIT" | cut -f1))"
  else
    say "JIT caches: $(du -sh "$JIT" | cut -f1) already on this box"
  fi
}

# use_deep_gemm BUNDLE: with DEEP_GEMM=source, DeepGEMM built from BUNDLE/deep_gemm (ci/build_deep_gemm.sh: reused
# when this box or BUNDLE/deep_gemm/build-KEY.tar.gz has the build) first on PYTHONPATH, in place of the deps'
# sgl-deep-gemm 0.1.5.post1; exports DEEP_GEMM_PATH (the folder, for runners that hand their children a path of
# their own) and SGLPATCH_DEEP_GEMM_RECORD (OUTDIR/deep_gemm_build.json), and, when the runner exits, writes
# that record's `deep_gemm` and `headers_identical_to` into every JSON result the run wrote in OUTDIR.
use_deep_gemm() {
  local bundle="$1" line
  DEEP_GEMM="${DEEP_GEMM:-${SGLPATCH_DEEP_GEMM:-wheel}}"
  DEEP_GEMM_PATH=""
  case "$DEEP_GEMM" in
    wheel) return 0 ;;
    source) ;;
    *) echo "--deep-gemm takes wheel or source, not $DEEP_GEMM" >&2; return 2 ;;
  esac
  touch "$OUTDIR/.deep_gemm_run_started"
  while IFS= read -r line; do
    echo "$line"
    case "$line" in DEEP_GEMM_PATH=*) DEEP_GEMM_PATH="${line#DEEP_GEMM_PATH=}" ;; esac
  done < <(PYTHON="$PY" bash "$REPO/ci/build_deep_gemm.sh" --bundle "$bundle" --out "$OUTDIR" \
    ${DEEP_GEMM_CXX:+--cxx "$DEEP_GEMM_CXX"} 2>&1)
  [ -n "$DEEP_GEMM_PATH" ] || { echo "the DeepGEMM source build is not in place (above)" >&2; return 4; }
  export DEEP_GEMM_PATH SGLPATCH_DEEP_GEMM_RECORD="$OUTDIR/deep_gemm_build.json"
  export PYTHONPATH="$DEEP_GEMM_PATH:$PYTHONPATH"
  say "deep_gemm from the source build: $("$PY" -c 'import deep_gemm; print(deep_gemm.__version__, deep_gemm.__file__)')"
  trap 'stamp_deep_gemm_results "$OUTDIR"' EXIT
}

# stamp_deep_gemm_results OUTDIR: the source build's record (deep_gemm, headers_identical_to) into each JSON object
# the run wrote in OUTDIR (newer than the run's start), beside what the result itself says.
stamp_deep_gemm_results() {
  "$PY" - "$1" "$SGLPATCH_DEEP_GEMM_RECORD" <<'PYEOF'
import json, sys
from pathlib import Path
out, record = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
started = (out / ".deep_gemm_run_started").stat().st_mtime
for path in sorted(out.rglob("*.json")):
    if path.name == "deep_gemm_build.json" or path.stat().st_mtime < started:
        continue
    try:
        data = json.loads(path.read_text())
    except ValueError:
        continue
    if isinstance(data, dict):
        if "deep_gemm" in data and not isinstance(data["deep_gemm"], dict):
            data["deep_gemm_reported"] = data["deep_gemm"]
        data["deep_gemm"] = record["deep_gemm"]
        data["headers_identical_to"] = record["headers_identical_to"]
        data["sm90_headers_sha256"] = record["sm90_headers_sha256"]
        path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"[deep_gemm] recorded the source build in {path}")
PYEOF
}

# save_jit_cache OUTDIR: JIT (use_bundle_env's, or a folder named jit a runner set itself) as
# OUTDIR/jit-cache.tar.gz, in 15 MiB parts (.part-aa, ...) when larger (the run tool brings back
# files of at most 16 MiB); use_bundle_env restores either form.
save_jit_cache() {
  local outdir="$1"
  tar -czf "$outdir/jit-cache.tar.gz" -C "$(dirname "$JIT")" jit 2>/dev/null || return 0
  if [ "$(stat -c %s "$outdir/jit-cache.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15m "$outdir/jit-cache.tar.gz" "$outdir/jit-cache.tar.gz.part-" && rm "$outdir/jit-cache.tar.gz"
  fi
  say "saved JIT caches: $(du -ch "$outdir"/jit-cache.tar.gz* | tail -1 | cut -f1)"
}

# unpack_line_sglang BUNDLE WORK LINE DEST: after unpack_bundle, LINE's pristine sglang to DEST (from WORK/pkgs
# for v0.5.14, the bundle's own; from BUNDLE/LINE/sglang.tar.xz for a newer line, ci/gpu_bundle.py --line LINE,
# with the line's own wheels, BUNDLE/LINE/deps.tar.xz, into WORK/site). Exit 3: the line's part is missing.
unpack_line_sglang() {
  local bundle="$1" work="$2" line="$3" dest="$4" part="$1/$3/sglang.tar.xz"
  if [ "$line" = v0.5.14 ]; then
    [ -d "$work/pkgs/sglang" ] || { echo "missing $bundle/sglang.tar.xz (run ci/gpu_bundle.py)" >&2; exit 3; }
    [ "$work/pkgs/sglang" = "$dest" ] || mv "$work/pkgs/sglang" "$dest"
    return 0
  fi
  [ -f "$part" ] || { echo "missing $part (ci/gpu_bundle.py --line $line)" >&2; exit 3; }
  rm -rf "$work/pkgs/sglang" "$work/line"
  extract_archive "$part" "$work/line" || exit 3  # members are pkgs/sglang/...
  mv "$work/line/pkgs/sglang" "$dest"
  if [ -f "$bundle/$line/deps.tar.xz" ]; then  # the line's own wheels (ci/gpu-bundle-requirements-LINE.txt)
    extract_archive "$bundle/$line/deps.tar.xz" "$work" || exit 3
    say "unpacked $line's own wheels into $work/site"
  fi
}

# make_line_trees BUNDLE WORK LINE SERIES RECORD [MARK]: unpack the shared deps and sgl-kernel, then the
# line's pristine sglang into WORK/trees/pristine/sglang (and a newer line's own wheels, BUNDLE/LINE/deps.tar.xz,
# into WORK/site) and a copy with SERIES applied
# (ci/apply_series.py, RECORD: what it applied) into WORK/trees/patched/sglang, and say so. v0.5.14's
# sglang is the bundle's own part, a newer line's sits in BUNDLE/LINE/ (ci/gpu_bundle.py --line LINE).
# MARK: a name the patched dsa_backend.py must then hold. Exit 3: bundle part missing; exit 4: the
# series did not apply, or the patched tree lacks MARK.
make_line_trees() {
  local bundle="$1" work="$2" line="$3" series="$4" record="$5" mark="${6:-}"
  fresh_work "$work" && mkdir -p "$work/trees/pristine" "$work/trees/patched"
  unpack_bundle "$bundle" "$work"
  unpack_line_sglang "$bundle" "$work" "$line" "$work/trees/pristine/sglang"
  cp -a "$work/trees/pristine/sglang" "$work/trees/patched/sglang"
  "$PY" "$REPO/ci/apply_series.py" "$series" --root "$work/trees/patched" --record "$record" \
    || { echo "patch series did not apply" >&2; exit 4; }
  say "trees ready in $work/trees"
  [ -z "$mark" ] || grep -q "$mark" "$work/trees/patched/sglang/srt/layers/attention/dsa_backend.py" \
    || { echo "series reported applied but dsa_backend.py has no $mark" >&2; exit 4; }
}

# series_sglang_tests ROOT [GLOB]: the tests the series put in sglang's tree, which ci/apply_series.py lays
# out under ROOT/test/registered (the package folders hold no test/ of their own), whose file names
# match GLOB (default test_*.py), one path a line, relative to ROOT.
series_sglang_tests() {
  (cd "$1" && find test/registered -name "${2:-test_*.py}" 2>/dev/null | sort)
}

# sglang_test_shims DIR: stand-ins, in DIR, for what sglang's test utilities import at module level but
# the box may lack (sglang.test.test_utils imports sglang.benchmark.datasets, which imports Hugging Face
# datasets' load_dataset); the DSA tests never load a dataset. Put DIR last on PYTHONPATH.
sglang_test_shims() {
  local dir="$1"
  mkdir -p "$dir"
  "$PY" -c "import datasets" 2>/dev/null && return 0
  mkdir -p "$dir/datasets"
  cat >"$dir/datasets/__init__.py" <<'PYEOF'
"""Stand-in (ci/gpu_box.sh sglang_test_shims): this box has no Hugging Face datasets. sglang.test.test_utils
imports sglang.benchmark.datasets, which imports datasets.load_dataset at module level; the DSA
tests never load a dataset."""


def load_dataset(*args, **kwargs):
    raise RuntimeError("datasets is not installed on this box (stand-in from ci/gpu_box.sh)")
PYEOF
  say "no 'datasets' here: a stand-in module that only raises, for sglang.test.test_utils' import"
}
