#!/usr/bin/env bash
# Build DeepGEMM's extension from the bundle's source on the GPU box (no network, no pip), against the box's
# torch and nvcc, and put it in place atomically. Run from the repository root, carrying .gpu-bundle (its
# deep_gemm/ part: python ci/gpu_bundle.py --deep-gemm LINE).
#
#   bash ci/build_deep_gemm.sh [--bundle DIR] [--out DIR] [--root DIR] [--cxx PATH] [--jobs N]
#                              [--smoke] [--debugger] [--rebuild]
#
#   --root DIR   where builds live (default $SGLPATCH_DEEP_GEMM_ROOT, else /tmp/sglpatch-deep-gemm): ROOT/builds/KEY
#                per build, ROOT/current the one in use (a symbolic link, switched with one rename)
#   --cxx PATH   the C++ compiler for the host code (default /usr/bin/g++ where it exists, else g++ on PATH; the
#                environment's CXX is not taken). The H200 box exports CXX=/opt/gcc/bin/g++: an extension built
#                with that wrapper (1.9 MB larger, no libstdc++ among its DT_NEEDED) segfaulted in its first
#                get_paged_mqa_logits_metadata call, twice (docs/results/deep_gemm_source_build_probe_h200.log,
#                docs/results/deep_gemm_build_h200.log); built with /usr/bin/g++ it links libstdc++ dynamically
#                and runs
#   --smoke      after the build: import deep_gemm from it and call get_paged_mqa_logits_metadata once
#                (2-D context lengths [8, 1] of 4096, block 64, every SM)
#   --debugger   run that smoke call under `cuda-gdb -batch -ex run -ex bt` (the box has cuda-gdb, no gdb)
#   --rebuild    build even when a build of this key is in place
#
# KEY is the sha256 (16 hex digits) of the bundle's source and third-party archives, the torch version, nvcc's
# version and the C++ compiler's: a build is reused, never redone, while all of them are the same. It is looked
# for in ROOT/builds/KEY (a box still warm), then in BUNDLE/deep_gemm/deep_gemm-build-KEY.tar.gz* (carried back from an
# earlier call's OUT: copy OUT/deep_gemm-build-KEY.tar.gz* there), and built only when neither has it. A build
# goes into ROOT/staging-<pid> and is renamed to ROOT/builds/KEY only when it imports; ROOT/current switches
# after that: a build cut short leaves the previous one in place and usable.
#
# Writes OUT/deep_gemm_build.json (what was built or reused: the line, commit, torch, nvcc, compiler, seconds,
# the sha256 of the three SM90 paged-MQA headers in the build and in sgl-deep-gemm's wheel, computed here) and,
# after a build, OUT/deep_gemm-build-KEY.tar.gz (parts of 15 MiB when larger). Prints DEEP_GEMM_PATH=<folder>:
# the folder to put first on PYTHONPATH.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE="$REPO/.gpu-bundle"
OUTDIR="${OUT:-$REPO/.gpu-bundle/results}"
ROOT="${SGLPATCH_DEEP_GEMM_ROOT:-/tmp/sglpatch-deep-gemm}"
# Not $CXX: the H200 box exports CXX=/opt/gcc/bin/g++, whose build segfaults (above); --cxx still picks any
CXX=g++; [ -x /usr/bin/g++ ] && CXX=/usr/bin/g++
JOBS="${MAX_JOBS:-16}"
SMOKE=0 DEBUGGER=0 REBUILD=0
PY="${PYTHON:-python3}"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --root) ROOT="$2"; shift 2 ;;
    --cxx) CXX="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --debugger) DEBUGGER=1; SMOKE=1; shift ;;
    --rebuild) REBUILD=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
T0=$(date +%s)
say() { echo "[build-deep-gemm +$(( $(date +%s) - T0 ))s] $*"; }
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
PART="$BUNDLE/deep_gemm"
for f in source.tar.xz third-party.tar.xz MANIFEST.json; do
  [ -f "$PART/$f" ] || { echo "missing $PART/$f (python ci/gpu_bundle.py --deep-gemm LINE)" >&2; exit 3; }
done
CXX_PATH=$(command -v "$CXX") || { echo "no C++ compiler $CXX" >&2; exit 2; }
mkdir -p "$OUTDIR" "$ROOT/builds" || exit 2
if [ -e "$ROOT/current" ] && [ ! -L "$ROOT/current" ]; then
  echo "build_deep_gemm.sh: $ROOT/current is not the link this script keeps there, and switching builds would" \
    "replace it; nothing was changed: move it, or name another --root" >&2
  exit 2
fi
# What a build cut short left: a staging folder this script marked, whose process is gone. Not one a build still
# running on the same ROOT holds, nor a folder of that name the script did not make.
for old in "$ROOT"/staging-*; do
  [ -f "$old/.sglpatch-staging" ] && ! kill -0 "${old##*/staging-}" 2>/dev/null && rm -rf "$old"
done

TORCH=$("$PY" -c 'import torch; print(torch.__version__)') || { echo "no torch in $PY" >&2; exit 2; }
NVCC=$("$CUDA_HOME/bin/nvcc" --version | grep -o 'release [0-9.]*, V[0-9.]*' | head -1)
CXX_VERSION=$("$CXX_PATH" --version | head -1)
KEY=$( { sha256sum "$PART/source.tar.xz" "$PART/third-party.tar.xz" | cut -d' ' -f1; echo "$TORCH"; echo "$NVCC"; \
  echo "$CXX_PATH $CXX_VERSION"; } | sha256sum | cut -c1-16)
say "key $KEY: torch $TORCH, nvcc $NVCC, $CXX_PATH ($CXX_VERSION)"

switch_to() {  # KEY: ROOT/current -> builds/KEY, in one rename
  ln -sfn "builds/$1" "$ROOT/current.new" && mv -T "$ROOT/current.new" "$ROOT/current"
}

build_into() {  # STAGING: unpack, build the extension in place, lay out the JIT's headers, record it
  local staging="$1" started
  mkdir -p "$staging" && : >"$staging/.sglpatch-staging" || return 1
  tar -xJf "$PART/source.tar.xz" -C "$staging" && tar -xJf "$PART/third-party.tar.xz" -C "$staging" || return 1
  local src="$staging/DeepGEMM" tp="$staging/third-party"
  started=$(date +%s)
  say "building deep_gemm._C (CXX=$CXX_PATH, MAX_JOBS=$JOBS)"
  # CC too: distutils compiles .cpp files and links with CC, and torch hands it to nvcc as -ccbin
  (cd "$src" && CC="$CXX_PATH" CXX="$CXX_PATH" MAX_JOBS="$JOBS" DG_USE_LOCAL_VERSION=0 \
    DG_CUTLASS_INCLUDE_DIR="$tp/cutlass/include" DG_FMT_INCLUDE_DIR="$tp/fmt/include" \
    "$PY" setup.py build_ext --inplace) >"$staging/build.log" 2>&1
  local rc=$?
  BUILD_SECONDS=$(( $(date +%s) - started ))
  if [ $rc -ne 0 ]; then
    tail -30 "$staging/build.log"; cp "$staging/build.log" "$OUTDIR/deep_gemm_build.log"
    say "build failed (exit $rc) after ${BUILD_SECONDS} s; log in OUT/deep_gemm_build.log"
    return 1
  fi
  say "built deep_gemm._C in ${BUILD_SECONDS} s"
  cp -r "$tp/cutlass/include/cute" "$tp/cutlass/include/cutlass" "$src/deep_gemm/include/"  # the JIT's include root
  rm -rf "$tp" "$src/build"  # the build's inputs and objects: in the bundle, not needed to run
  echo "$BUILD_SECONDS" >"$staging/build_seconds"
}

record() {  # FOLDER (a build: DeepGEMM/, wheel-headers/): OUT/deep_gemm_build.json, hashes computed now
  "$PY" - "$1" "$PART/MANIFEST.json" "$KEY" "$TORCH" "$NVCC" "$CXX_PATH" "$CXX_VERSION" "$2" >"$OUTDIR/deep_gemm_build.json" <<'EOF'
import hashlib, json, sys
from pathlib import Path
folder, manifest, key, torch, nvcc, cxx, cxx_version, how = sys.argv[1:]
folder, manifest = Path(folder), json.loads(Path(manifest).read_text())
headers = [
    "deep_gemm/include/deep_gemm/impls/sm90_fp8_paged_mqa_logits.cuh",
    "deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh",
    "deep_gemm/include/deep_gemm/mma/sm90.cuh",
]
digest = lambda path: hashlib.sha256(path.read_bytes()).hexdigest()
in_build = {h: digest(folder / "DeepGEMM" / h) for h in headers}
in_wheel = {h: digest(folder / "wheel-headers" / h) for h in headers}
wheel = manifest["stand_in_wheel"]["filename"]
name_version = "sgl-deep-gemm " + wheel.split("-")[1]
seconds = (folder / "build_seconds").read_text().strip() if (folder / "build_seconds").is_file() else None
print(json.dumps({
    "deep_gemm": {
        "source": manifest["source"],
        "commit": manifest["commit"],
        "head": manifest["head"],
        "line": manifest["line"],
        "patches": [p["name"] for p in manifest["patches"]],
        "built_with": {"torch": torch, "nvcc": nvcc, "cxx": f"{cxx} ({cxx_version})"},
    },
    "headers_identical_to": name_version if in_build == in_wheel else None,
    "sm90_headers_sha256": {"build": in_build, "wheel": in_wheel, "wheel_file": wheel},
    "build": {"key": key, "how": how, "seconds": int(seconds) if seconds else None, "folder": str(folder)},
}, indent=2))
EOF
}

smoke() {  # import deep_gemm from ROOT/current and schedule one small paged-MQA call (under cuda-gdb if asked)
  local script="$ROOT/smoke.py"
  cat >"$script" <<'EOF'
import sys, torch
import deep_gemm
print("deep_gemm", deep_gemm.__version__, "from", deep_gemm.__file__, flush=True)
print("sms", deep_gemm.get_num_sms(), flush=True)
for next_n in (1, 2):
    lens = torch.full((8, next_n), 4096, dtype=torch.int32, device="cuda")
    print(f"get_paged_mqa_logits_metadata, context lengths {tuple(lens.shape)} ...", flush=True)
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, deep_gemm.get_num_sms())
    torch.cuda.synchronize()
    print("  schedule", tuple(meta.shape), meta[:2].tolist(), flush=True)
EOF
  if [ "$DEBUGGER" = 1 ]; then
    say "smoke call under cuda-gdb"
    PYTHONPATH="$ROOT/current/DeepGEMM${PYTHONPATH:+:$PYTHONPATH}" cuda-gdb -batch -ex run -ex bt --args "$PY" "$script"
  else
    PYTHONPATH="$ROOT/current/DeepGEMM${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$script"
  fi
  say "smoke call: exit $?"
}

HOW=reused
if [ "$REBUILD" = 0 ] && [ -f "$ROOT/builds/$KEY/BUILD_OK" ]; then
  say "build $KEY is on this box already"
else
  STAGING="$ROOT/staging-$$"
  trap 'rm -rf "$STAGING"' EXIT  # cut short: the staging folder goes, ROOT/current stays as it was
  CARRIED=$(ls "$PART/deep_gemm-build-$KEY.tar.gz" "$PART/deep_gemm-build-$KEY".tar.gz.part-* 2>/dev/null | head -1)
  if [ "$REBUILD" = 0 ] && [ -n "$CARRIED" ]; then
    mkdir -p "$STAGING" && cat "$PART/deep_gemm-build-$KEY".tar.gz* | tar -xz -C "$STAGING" || exit 4
    HOW="restored from BUNDLE/deep_gemm/deep_gemm-build-$KEY.tar.gz"
  else
    build_into "$STAGING" || exit 4
    HOW=built
  fi
  PYTHONPATH="$STAGING/DeepGEMM" "$PY" -c 'import deep_gemm' || { say "the build does not import"; exit 4; }
  touch "$STAGING/BUILD_OK"
  rm -rf "$ROOT/builds/$KEY" && mv -T "$STAGING" "$ROOT/builds/$KEY" || exit 4
  trap - EXIT
  if [ "$HOW" = built ]; then
    tar -czf "$OUTDIR/deep_gemm-build-$KEY.tar.gz" -C "$ROOT/builds/$KEY" . || exit 4
    if [ "$(stat -c %s "$OUTDIR/deep_gemm-build-$KEY.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
      split -b 15m "$OUTDIR/deep_gemm-build-$KEY.tar.gz" "$OUTDIR/deep_gemm-build-$KEY.tar.gz.part-" \
        && rm "$OUTDIR/deep_gemm-build-$KEY.tar.gz"
    fi
    say "build cache for a later call: $(du -ch "$OUTDIR"/deep_gemm-build-"$KEY".tar.gz* | tail -1 | cut -f1) in OUT (carry it back: copy it into .gpu-bundle/deep_gemm/)"
  fi
fi
switch_to "$KEY" || exit 4
record "$ROOT/builds/$KEY" "$HOW" || exit 4
say "deep_gemm $HOW: $(grep -o '"headers_identical_to": [^,]*' "$OUTDIR/deep_gemm_build.json")"
[ "$SMOKE" = 1 ] && smoke
echo "DEEP_GEMM_PATH=$ROOT/current/DeepGEMM"
